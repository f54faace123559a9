"""`python -m targets.kunlun.codegen FILE.xpu ...`: the dialect lint (lint.py) over .xpu files;
exit status 1 when a file breaks a rule."""
import sys

from .lint import main

sys.exit(main())
