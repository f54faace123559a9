#!/usr/bin/env bash
# Runs the test suite (installs what it needs into .venv on first use) on as many pytest-xdist
# workers as the machine has cores (TILEJIT_TEST_WORKERS=N to choose; 0 runs in this process).
# Workers share the session's compile cache. The tiers and their times are in docs/testing.md:
#   bash scripts/test.sh            every tier but slow and device
#   bash scripts/test.sh --quick    the no_toolchain tier, with every kernel build refused
#   bash scripts/test.sh --all      every tier; device tests skip without a GPU (what .ci/run runs)
# Other arguments go to pytest, a marker expression included: bash scripts/test.sh -m emulation
source "$(dirname "$0")/env.sh"
select=()
tiers="every tier but slow and device (--quick, --all: docs/testing.md)"
case "${1:-}" in
    --quick) shift; select=(-m no_toolchain); tiers="the no_toolchain tier, every kernel build refused"
             export TILEJIT_TEST_NO_TOOLCHAIN=1 ;;
    --all) shift; select=(-m all); tiers="every tier" ;;
esac
[[ " $* " == *" -m "* ]] && tiers="the tiers the -m expression selects"
echo "tilejit tests: $tiers, on ${TILEJIT_TEST_WORKERS:-$(nproc 2>/dev/null || echo all)} workers"
exec python -m pytest -n "${TILEJIT_TEST_WORKERS:-auto}" -rs --durations=20 "${select[@]}" "$@"
