#!/usr/bin/env bash
# Runs the main job on the default target (cpu): compile and run the example kernels.
source "$(dirname "$0")/env.sh"
exec python -m examples.demo "$@"
