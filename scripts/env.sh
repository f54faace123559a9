# Creates (once) and activates the project's virtual environment in .venv; sourced by the other
# scripts. torch's CPU build is installed first, so no CUDA wheel is ever pulled on a CPU-only
# machine: torch==$TILEJIT_TORCH_VERSION+cpu on Linux (plain torch==VERSION elsewhere: PyPI's
# macOS wheels are CPU builds), from the indexes pip is configured with when one has that build,
# else from $TILEJIT_TORCH_INDEX (default: PyTorch's CPU index). TILEJIT_TORCH_SPEC installs
# another build instead (e.g. one for your CUDA version on a GPU machine). Then tilejit itself,
# editable, with its test extras. Reinstalls when pyproject.toml or this file change.
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
    version="${TILEJIT_TORCH_VERSION:-2.13.0}"
    if [ "$(uname -s)" = Linux ]; then torch="torch==$version+cpu"; else torch="torch==$version"; fi
    torch="${TILEJIT_TORCH_SPEC:-$torch}"
    pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    # progress on stderr, a line per step (pip itself is quiet): the first setup takes minutes
    start=$SECONDS
    echo "setting up $venv (first use, or pyproject.toml changed; about 2 minutes on 2 cores):" >&2
    echo "  [1/2] $torch, about 190 MB ..." >&2
    # --no-deps: torch's own dependencies come with tilejit's install below, from the usual index
    if ! "${pip[@]}" --no-deps "$torch" 2>/dev/null; then
        "${pip[@]}" --no-deps "$torch" --index-url "${TILEJIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
    fi
    echo "  [2/2] tilejit, editable, with its test extras (transformers, pytest) ... ($((SECONDS - start)) s so far)" >&2
    "${pip[@]}" -e "$root[test]"
    echo "$want" > "$stamp"
    echo "  .venv ready in $((SECONDS - start)) s" >&2
fi
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
cd "$root"
