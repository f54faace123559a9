"""A differential fuzzer for the kunlun target: generated kernels (tests/kunlun_fuzz.py: elementwise,
reduction, scan, dot and masked-loop kernels over fp32/fp16/bf16 at block sizes from a few lanes to
tiles that must be strip-mined, double-buffered or spilled) run on kunlun:xpu2 and kunlun:xpu3 in
host emulation and on cpu; strict must be bitwise equal, fast within a tolerance scaled to the
output (and with the same infinities and NaNs). Fixed seeds: the default tier runs a sample, the
slow tier many more. A failure prints the kernel's source and what was drawn."""
import os

import pytest
import torch

import targets.kunlun
from compiler import numerics, use_target
from compiler.target import register_target

import kunlun_fuzz as F   # tests/ is on sys.path (conftest.py lives there)

pytestmark = pytest.mark.emulation
register_target("kunlun", targets.kunlun.TARGET)

# every dtype; and the fp16 online-softmax loop that gave inf at -O2 without -fno-ivopts (toolchain.py)
SAMPLE = F.cases(seed=11, per_family=2) + F.cases(seed=10, per_family=1) + \
    [c for c in F.cases(seed=3, per_family=1) if c.family == "masked_loop"]
LONG = [c for seed in range(100, 100 + int(os.environ.get("TILEJIT_FUZZ_SEEDS", "8")))
        for c in F.cases(seed=seed, per_family=4)]
ARCHS = ("kunlun:xpu2", "kunlun:xpu3")
# fast: relative to the output's largest magnitude (sums in another order, the target's own exp)
FAST_TOL = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_kernels")


def _run(case, kfn, target, policy):
    args = case.make_inputs()
    with use_target(target), numerics(policy):
        kfn[case.grid](*args, **case.meta)
    return [args[i] for i in case.outputs]


def _compare(case, got, want, target, policy):
    for g, w in zip(got, want):
        what = f"{case.id} ({case.note}) on {target}, {policy}: differs from cpu\n{case.source}"
        if policy == "strict":
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}\n{m}")
            continue
        finite = torch.isfinite(w.float())
        scale = w.float()[finite].abs().max().item() if finite.any() else 1.0
        torch.testing.assert_close(g.float(), w.float(), rtol=FAST_TOL[w.dtype], atol=FAST_TOL[w.dtype] * scale,
                                   equal_nan=True, msg=lambda m: f"{what}\n{m}")


def check(case, kernel_dir, policy):
    kfn = case.kernel(kernel_dir)
    want = _run(case, kfn, "cpu", policy)
    for target in ARCHS:
        _compare(case, _run(case, kfn, target, policy), want, target, policy)


# the default tiers: every family once, every dtype and both policies, and the fp16 online-softmax
# loop in fast (where it gave inf); the rest of SAMPLE x policies in slow
DEFAULT = {"elementwise-10-0": "strict", "reduction-11-0": "fast", "scan-11-1": "strict", "dot-10-0": "fast",
           "carried_loop-11-0": "strict", "masked_loop-3-0": "fast"}
GRID = [pytest.param(c, policy, id=f"{c.id}-{policy}", marks=() if DEFAULT.get(c.id) == policy else pytest.mark.slow)
        for c in SAMPLE for policy in ("strict", "fast")]


@pytest.mark.parametrize("case, policy", GRID)
def test_generated_kernels_match_cpu(case, policy, kernel_dir):
    check(case, kernel_dir, policy)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["strict", "fast"])
@pytest.mark.parametrize("case", LONG, ids=[c.id for c in LONG])
def test_generated_kernels_match_cpu_long(case, policy, kernel_dir):
    check(case, kernel_dir, policy)
