#!/usr/bin/env bash
# Runs the test suite (installs what it needs into .venv on first use).
source "$(dirname "$0")/env.sh"
exec python -m pytest "$@"
