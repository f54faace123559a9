# Creates (once) and activates the project's virtual environment in .venv.
# torch is pinned to the CPU build first, so no CUDA wheel is ever pulled on a CPU-only machine.
set -e
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
stamp="$venv/.tilejit-installed"
want="$(cat "$root/pyproject.toml" "$root/scripts/env.sh" | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==${TILEJIT_TORCH_VERSION:-2.13.0}"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[test]"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$root"
