#!/usr/bin/env bash
# Runs one command inside the project's virtual environment, from the repository root, without
# activating it (installs what it needs into .venv on first use):
#   bash scripts/run.sh python -m compiler.doctor
source "$(dirname "$0")/env.sh"
exec "$@"
