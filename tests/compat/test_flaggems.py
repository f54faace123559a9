"""FlagGems 5.0.2's softmax, unchanged, through its own host function (`softmax(x, dim, half_to_float)`
with the NVIDIA heuristics: a row over 32K elements walks TILE_N=4096 chunks in loops, a shorter
one is one tile; the kernel over other dims asks torch.cuda for the SM count), on cpu, kunlun:xpu2 and kunlun:xpu3 (host emulation) in both numerics
policies, against torch: kunlun bitwise equal to cpu in strict. The fp16 row of 40000 (160000
elements in all) once gave inf on kunlun in fast: the host compiler deleted the in-place widening
of fp16 tiles fetched ahead (docs/kunlun.md, "Verified here")."""
import pytest
import torch

import targets.kunlun
from compiler import numerics, use_target
from compiler.target import register_target

pytestmark = pytest.mark.emulation
register_target("kunlun", targets.kunlun.TARGET)

TARGETS = ["cpu", "kunlun:xpu2", "kunlun:xpu3"]


@pytest.mark.parametrize("shape, dim, dtype", [((4, 40000), -1, torch.float16), ((2, 33000), -1, torch.float32),
                                               ((3, 700), -1, torch.bfloat16)],
                         ids=["fp16-row-loop", "fp32-row-loop", "bf16-one-tile"])
@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.sampled
def test_flaggems_softmax(flaggems_softmax, shape, dim, dtype, policy):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    x.view(-1)[::97] = float("-inf")   # FlagGems' kernel handles -inf in its input
    want = torch.softmax(x.float(), dim)
    out = {}
    for t in TARGETS:
        with use_target(t), numerics(policy):
            out[t] = flaggems_softmax.softmax(x, dim, False)
        assert torch.isfinite(out[t]).all(), f"{t}: non-finite outputs"
        torch.testing.assert_close(out[t].float(), want, rtol=1e-2 if dtype != torch.float32 else 1e-5,
                                   atol=1e-3 if dtype != torch.float32 else 1e-6)
    if policy == "strict":
        for t in TARGETS[1:]:
            assert torch.equal(out[t], out["cpu"]), f"{t} differs from cpu in strict"
