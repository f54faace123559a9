"""`python -m compiler.cache {ls, stats, export, import, verify, prune, clear}`: see compiler/cache/cli.py."""
import os
import sys

# these commands launch no kernel: importing the op library (an import checks decisions against
# it) must not build the launch path's module into the cache being inspected, or imported into
os.environ.setdefault("TILEJIT_FAST_LAUNCH", "0")

from compiler.cache.cli import main  # noqa: E402

sys.exit(main())
