"""What the library ops launch on the gpu target: configs that carry warps and pipeline stages,
attention's 16-bit dots in the fast policy (`Caps.narrow_dots`), and row blocks that stay on the
matrix unit (`Caps.dot_min_rows`). Rendering, compile-only builds and Triton's interpreter; the
timings behind the defaults are benchmarks/gpu_check.py's and gpu_configs.py's (docs/gpu.md)."""
import json

import pytest
import torch

pytest.importorskip("triton")

import compiler  # noqa: E402
import kernels  # noqa: E402
from benchmarks.gpu_check import attention_tolerance  # noqa: E402
from compiler import jit as J  # noqa: E402
from kernels.attention import SPEC as ATTENTION  # noqa: E402
from kernels.matmul import SPEC as MATMUL  # noqa: E402

pytestmark = pytest.mark.no_toolchain

bf16 = torch.bfloat16


def _attention_launch(target, policy, q, k):
    with compiler.use_target(target), compiler.numerics(policy), compiler.render_only() as seen:
        kernels.attention(q, k, k, causal=True)
    (r,) = [r for r in seen if r.name == "attention_kernel"]
    return r


def _dot_operand_dtypes(rendered):
    return [(str(d.operands[0].dtype), str(d.operands[1].dtype)) for d in rendered.ir.walk() if d.name == "dot"]


def test_fast_attention_dots_are_16_bit_only_where_the_target_has_matrix_units():
    q, k = torch.randn(1, 4, 64, 128, dtype=bf16), torch.randn(1, 2, 64, 128, dtype=bf16)
    assert _dot_operand_dtypes(_attention_launch("gpu:sm_90", "fast", q, k)) == [("bf16", "bf16")] * 2
    # strict keeps its fp32 fma chain everywhere; kunlun keeps fp32 operands in fast too, and so does
    # cpu unless its bf16 dots run on AMX tiles (then bf16: Caps.narrow_dots)
    for target, policy in (("gpu:sm_90", "strict"), ("cpu", "strict"), ("kunlun:xpu3", "fast")):
        assert _dot_operand_dtypes(_attention_launch(target, policy, q, k)) == [("fp32", "fp32")] * 2, target
    cpu_narrow = "bfloat16" in compiler.get_target("cpu").caps.narrow_dots
    assert _dot_operand_dtypes(_attention_launch("cpu", "fast", q, k)) == [("bf16" if cpu_narrow else "fp32",) * 2] * 2
    assert _dot_operand_dtypes(_attention_launch("cpu", "fast", q.half(), k.half())) == [("fp32", "fp32")] * 2
    q32, k32 = q.float(), k.float()
    assert _dot_operand_dtypes(_attention_launch("gpu:sm_90", "fast", q32, k32)) == [("fp32", "fp32")] * 2


def test_serving_attention_dots_are_16_bit_where_attention_s_are():
    """The serving kernel (varlen, paged) follows the same rule as kernels.attention."""
    from kernels import serving_attention as sa
    q, k = torch.randn(3, 4, 64, dtype=bf16), torch.randn(8, 2, 64, dtype=bf16)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    cpu_narrow = "bfloat16" in compiler.get_target("cpu").caps.narrow_dots
    for target, policy, narrow in (("gpu:sm_90", "fast", True), ("gpu:sm_90", "strict", False),
                                   ("cpu", "fast", cpu_narrow), ("kunlun:xpu3", "fast", False)):
        with compiler.use_target(target), compiler.numerics(policy), compiler.render_only() as seen:
            sa.varlen_attention(q, k, k, cu, torch.tensor([0, 8], dtype=torch.int32))
        (r,) = [r for r in seen if r.name == "serving_attention_kernel"]
        assert _dot_operand_dtypes(r) == [("bf16", "bf16") if narrow else ("fp32", "fp32")] * 2, (target, policy)


@pytest.mark.compile
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_attention_stays_within_the_probability_rounding_bound(dtype):
    """The interpreter runs the gpu target's fast source: p rounded to v's dtype moves each output
    by at most the unit roundoff times max |v| (gpu_check.py's tolerance), and no further."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, h, s, 64, generator=g).to(dtype) for h, s in ((4, 40), (2, 56), (2, 56)))
    ref = kernels.attention_ref(q, k, v, causal=True)
    with compiler.use_target("gpu:interpret"):
        got = kernels.attention(q, k, v, causal=True)
    base = dict(rtol=1.6e-2, atol=1e-5) if dtype is bf16 else dict(rtol=2e-3, atol=1e-4)
    torch.testing.assert_close(got.float(), ref.float(), **attention_tolerance(base, v))
    # the rounding is real: the fp32-operand path (cpu's strict) is closer to the reference
    with compiler.numerics("strict"):
        cpu = kernels.attention(q, k, v, causal=True)
    assert (got.double() - ref.double()).abs().max() > (cpu.double() - ref.double()).abs().max()


def test_decode_rows_keep_a_tensor_core_block_on_gpu_and_shrink_on_cpu():
    """8 sequences x 32 query heads / 8 kv heads, one query each: 4 packed rows per program. The
    gpu block keeps tl.dot's 16 rows (4 rows would render an fma chain, 100x slower on an H200);
    cpu runs the 4 rows it has."""
    q, k = torch.randn(8, 32, 1, 128, dtype=bf16), torch.randn(8, 8, 64, 128, dtype=bf16)
    for target, rows in (("gpu:sm_90", 16), ("cpu", 4)):
        with compiler.use_target(target), compiler.render_only() as seen:
            kernels.attention(q, k, k)
        shapes = [d.operands[0].shape[0] for d in seen[-1].ir.walk() if d.name == "dot"]
        assert shapes == [rows, rows], (target, shapes)
    # the floor never raises a block past its config: an explicit BLOCK_M of 8 stays 8
    assert ATTENTION.launched({"BLOCK_M": 8, "BLOCK_N": 64}, {"head_dim": 128, "seq_k": 64, "seq_q": 4},
                              "fast", compiler.get_target("gpu:sm_90").caps)["BLOCK_M"] == 8


@pytest.mark.compile
def test_configs_carry_launch_options_that_only_the_gpu_build_honours():
    a, b = torch.randn(40, 64, dtype=bf16), torch.randn(64, 48, dtype=bf16)
    tiles = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}
    # cpu: accepted, no effect on the result
    assert torch.equal(kernels.matmul(a, b, config={**tiles, "num_warps": 8, "num_stages": 4}),
                       kernels.matmul(a, b, config=tiles))
    with pytest.raises(ValueError, match="num_warp is not a parameter of matmul"):
        kernels.matmul(a, b, config={**tiles, "num_warp": 8})
    # gpu: the build uses them (Triton's metadata of the cache entry)
    with compiler.use_target("gpu:sm_90"), compiler.compile_only() as built:
        kernels.matmul(a, b, config={**tiles, "num_warps": 8, "num_stages": 4})
    (ck,) = built
    meta = json.loads(J.kernel_cache().lookup(ck.key).file("metadata.json").read_text())
    assert (meta["num_warps"], meta["num_stages"]) == (8, 4)


def test_gpu_defaults_name_warps_and_stages_from_the_measured_candidates():
    caps = compiler.get_target("gpu:sm_90").caps
    for spec, dims in ((MATMUL, {"N": 4096, "K": 4096, "M": 4096}),
                       (ATTENTION, {"head_dim": 128, "seq_k": 2048, "seq_q": 2048})):
        default = spec.default_config(caps, dims)
        assert {"num_warps", "num_stages"} <= default.keys()
        assert default in spec.candidates(caps), spec.name   # the autotuner ranks it with the others
        assert spec.config_problem(default) is None


def test_autotuning_on_a_gpu_device_is_refused_with_the_way_out(monkeypatch):
    """The autotuner's problems are CPU tensors timed on the host clock: on a device target it
    would time launches, not kernels. It says so instead (the device target as the plugin creates
    it on an sm_90 device; only torch's device query is replaced)."""
    import targets.gpu  # noqa: PLC0415
    from compiler.autotune import AutotuneError, tune_ops  # noqa: PLC0415
    monkeypatch.setattr(targets.gpu, "_device_arch", lambda: ("cuda", "sm_90"))
    dev = targets.gpu.TARGET.create(None)
    with pytest.raises(AutotuneError, match="gpu_configs.py.*--arch sm_90"):
        tune_ops(["rms_norm"], target=dev, quick=True, progress=False)
