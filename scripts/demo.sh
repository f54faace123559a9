#!/usr/bin/env bash
# The main job on the default target: tune the library kernels (python -m compiler.autotune) and
# print the summary. Extra arguments go to the autotuner (e.g. --quick, --budget 60, --kernels rms_norm).
# The example kernels' demo is `python -m examples.demo`.
source "$(dirname "$0")/env.sh"
exec python -m compiler.autotune --target "${TILEJIT_TARGET:-cpu}" "$@"
