"""Runs differential cases through Triton's interpreter, in a process of its own.

Triton's interpreter only works when TRITON_INTERPRET=1 is set *before* triton is imported: the
standard-library functions (tl.sum, tl.max, tl.sigmoid, ...) are themselves @triton.jit functions,
decorated at import time.  Setting that variable inside the pytest process would change how every
other test sees triton, so the test runs this script as a subprocess instead:

    TRITON_INTERPRET=1 python interp_runner.py OUT.pt CASE_ID...

and reads back {case_id: {"outputs": {name: tensor}} | {"error": traceback}}.
"""

import os
import sys
import traceback

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import triton  # noqa: E402

import diff_kernels as dk  # noqa: E402


def interpreter_jit(fn):
    return triton.jit(dk.rebind(fn, triton.jit))


def main(out_path, ids):
    results = {}
    for case_id in ids:
        try:
            results[case_id] = {"outputs": dk.run_case(dk.CASES_BY_ID[case_id], interpreter_jit)}
        except Exception:
            results[case_id] = {"error": traceback.format_exc()}
    torch.save(results, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
