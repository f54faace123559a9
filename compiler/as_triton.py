"""`python -m compiler.as_triton script.py [args]` or `python -m compiler.as_triton -m module [args]`:
runs a program written against `import triton` with tilejit's front door served as `triton`
(compiler/triton/alias.py). The target is TILEJIT_TARGET (default cpu). TILEJIT_AS_TRITON=1 is
set for child processes, whose `import compiler` installs the alias too."""
from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m compiler.as_triton script.py [args ...] | -m module [args ...]"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    from compiler.triton import install_alias  # noqa: PLC0415
    os.environ["TILEJIT_AS_TRITON"] = "1"
    install_alias()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"compiler.as_triton: no such script {script!r}\n{USAGE}", file=sys.stderr)
        return 2
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
