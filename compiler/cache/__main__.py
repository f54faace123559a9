"""`python -m compiler.cache {ls, stats, export, import, verify, prune, clear}`: see compiler/cache_cli.py."""
import sys

from compiler.cache_cli import main

sys.exit(main())
