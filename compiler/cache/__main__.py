"""`python -m compiler.cache {ls, stats, export, import, verify, prune, clear}`: see compiler/cache/cli.py."""
import sys

from compiler.cache.cli import main

sys.exit(main())
