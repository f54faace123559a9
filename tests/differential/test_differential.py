"""Differential tests: every kernel in ``diff_kernels`` is one plain function written against
``triton.language``; it runs through Triton's interpreter (on CPU torch tensors) and through
tilejit (``compiler.kernel(fn)[grid](...)``, default target) and the outputs are compared.

- ``test_interpreter_matches_torch``: the Triton side against a torch reference.  This pins the
  kernels themselves down as correct Triton, independently of tilejit.
- ``test_tilejit_matches_interpreter``: tilejit against the interpreter, bitwise where both sides
  perform the same operations in the same order, otherwise with the tolerance documented beside
  the case (see ``diff_kernels`` for the reasons).

The interpreter side runs once per test session, in a subprocess (see ``interp_runner``), for the
cases the session selected.

Known interpreter deviation: Triton's interpreter converts fp32 -> bf16 by *truncation* when no
rounding mode is given (``_convert_float`` with rounding_mode=None), whereas compiled Triton, torch
and tilejit round to nearest even.  So every bf16 output is checked against the torch reference on
the tilejit side, and allowed one bf16 ulp on the interpreter-vs-torch side.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from . import diff_kernels as dk

pytestmark = pytest.mark.compile

CASE_IDS = [c.id for c in dk.CASES]
BF16_ULP = (2.0 ** -7, 1e-30)   # one bf16 ulp, relative (the interpreter's truncating downcast)


@pytest.fixture(scope="session")
def interpreter_results(request, tmp_path_factory):
    wanted = sorted({item.callspec.params["case_id"] for item in request.session.items
                     if hasattr(item, "callspec") and "case_id" in item.callspec.params
                     and item.module.__name__ == __name__
                     and dk.CASES_BY_ID[item.callspec.params["case_id"]].interp_ok})
    out = tmp_path_factory.mktemp("interp") / "results.pt"
    env = dict(os.environ, TRITON_INTERPRET="1")
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interp_runner.py")
    proc = subprocess.run([sys.executable, runner, str(out), *wanted], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"interpreter runner failed:\n{proc.stdout}\n{proc.stderr}"
    return torch.load(out)


def _interp_outputs(results, case_id):
    r = results[case_id]
    if "error" in r:
        pytest.fail(f"{case_id}: Triton's interpreter raised:\n{r['error']}")
    return r["outputs"]


def _compare(got, want, tol, what):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    rtol, atol = (0.0, 0.0) if tol is None else tol
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _loosest(a, b):
    if a is None:
        return b
    return (max(a[0], b[0]), max(a[1], b[1]))


@pytest.mark.integration
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_interpreter_matches_torch(case_id, interpreter_results):
    case = dk.CASES_BY_ID[case_id]
    if not case.interp_ok:
        pytest.skip("Triton's interpreter cannot run this case (see diff_kernels)")
    got = _interp_outputs(interpreter_results, case_id)
    want = case.ref(dk.make_inputs(case))
    for name in case.outputs:
        tol = case.ref_tol[name]
        if got[name].dtype == torch.bfloat16:
            tol = _loosest(tol, BF16_ULP)
        _compare(got[name], want[name].to(got[name].dtype), tol, f"{case_id}: interpreter {name!r} vs torch")


@pytest.mark.integration
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_tilejit_matches_interpreter(case_id, interpreter_results):
    from compiler import kernel

    case = dk.CASES_BY_ID[case_id]
    got = dk.run_case(case, lambda fn: kernel(dk.rebind(fn, kernel)))
    if not case.interp_ok:
        ref = case.ref(dk.make_inputs(case))
        for name in case.outputs:
            _compare(got[name], ref[name].to(got[name].dtype), case.ref_tol[name],
                     f"{case_id}: tilejit {name!r} vs torch (not runnable on the interpreter)")
        return
    interp = _interp_outputs(interpreter_results, case_id)
    ref = None
    for name in case.outputs:
        if got[name].dtype == torch.bfloat16:
            ref = ref if ref is not None else case.ref(dk.make_inputs(case))
            _compare(got[name], ref[name].to(torch.bfloat16), case.tol[name],
                     f"{case_id}: tilejit {name!r} vs torch (bf16: interpreter truncates)")
        else:
            _compare(got[name], interp[name], case.tol[name], f"{case_id}: tilejit {name!r} vs interpreter")
