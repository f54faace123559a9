#!/usr/bin/env bash
# Runs the test suite (installs what it needs into .venv on first use), on as many pytest-xdist
# workers as the machine has cores (TILEJIT_TEST_WORKERS=N to choose; 0 runs in this process).
# Workers share the session's compile cache; extra arguments go to pytest.
source "$(dirname "$0")/env.sh"
exec python -m pytest -n "${TILEJIT_TEST_WORKERS:-auto}" "$@"
