"""Launch and decorator options: accepted at launch, in warmup, in @kernel / @triton.jit; forwarded
to triton.compile on the gpu target (and part of its cache key there); no effect (one compiled
kernel) elsewhere; misspelt names rejected with the name, a suggestion and the valid list;
do_not_specialize; positional constexprs."""
import json

import pytest
import torch

from compiler import compile_only, get_target, kernel, numerics, triton, use_target
from compiler import language as tl
from compiler.errors import KernelArgumentError
from compiler.launch_options import LAUNCH, for_target

pytestmark = pytest.mark.compile


def _double(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)


def test_options_accepted_at_launch_and_warmup_with_no_effect_on_cpu():
    k = kernel(_double)
    x, y = torch.randn(40), torch.zeros(40)
    k[(2,)](x, y, 40, BLOCK=32, num_warps=8, num_stages=3, num_ctas=1, maxnreg=128, enable_fp_fusion=False,
            debug=False, grf_mode="large", waves_per_eu=2)
    torch.testing.assert_close(y, x * 2)
    k[(2,)](x, y, 40, BLOCK=32, num_warps=2)
    ck = k.warmup(x, y, 40, BLOCK=32, num_warps=16, num_stages=1)
    # cpu honours none of them: one specialisation, one cache entry, whatever the option values
    assert len(k.compiled) == 1 and ck is next(iter(k.compiled.values()))
    assert for_target(get_target("cpu"), {"num_warps": 8}) == ()
    assert for_target(get_target("kunlun:xpu3"), {"num_warps": 8}) == ()


def test_options_in_the_decorator():
    k = kernel(num_warps=8, num_stages=2, noinline=True)(_double)
    j = triton.jit(do_not_specialize=["n"], debug=True, num_warps=4)(_double)
    for f in (k, j):
        x, y = torch.randn(20), torch.zeros(20)
        f[(1,)](x, y, 20, BLOCK=32)
        torch.testing.assert_close(y, x * 2)
    assert k.launch_defaults == {"num_warps": 8, "num_stages": 2}


@pytest.mark.no_toolchain
def test_misspelt_options_name_themselves_and_the_valid_ones():
    k = kernel(_double)
    x, y = torch.randn(4), torch.zeros(4)
    with pytest.raises(KernelArgumentError) as e:
        k[(1,)](x, y, 4, BLOCK=4, num_warp=4)
    msg = str(e.value)
    assert "'num_warp'" in msg and "Did you mean 'num_warps'" in msg and "num_stages" in msg and "BLOCK" in msg
    with pytest.raises(KernelArgumentError, match="'BLOKC'.*Did you mean 'BLOCK'"):
        k[(1,)](x, y, 4, BLOKC=4)
    with pytest.raises(KernelArgumentError, match="'num_stage'.*Did you mean 'num_stages'"):
        k.warmup(x, y, 4, BLOCK=4, num_stage=2)
    with pytest.raises(KernelArgumentError, match="'do_not_specialise'.*Did you mean 'do_not_specialize'"):
        triton.jit(do_not_specialise=["n"])(_double)
    with pytest.raises(KernelArgumentError, match="do_not_specialize names 'nn'.*Did you mean 'n'"):
        triton.jit(do_not_specialize=["nn"])(_double)
    with pytest.raises(KernelArgumentError, match="num_warps=3 must be a positive power of two"):
        k[(1,)](x, y, 4, BLOCK=4, num_warps=3)


def test_do_not_specialize_compiles_one_kernel_for_every_value():
    def plain(x, y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n) + n, mask=offs < n)

    x, y = torch.randn(64), torch.zeros(64)
    spec = triton.jit(plain)
    nospec = triton.jit(do_not_specialize=["n"])(plain)
    noalign = triton.jit(do_not_specialize_on_alignment=[2])(plain)
    for f in (spec, nospec, noalign):
        for n in (1, 16, 17):
            y.zero_()
            f[(1,)](x, y, n, BLOCK=64)
            torch.testing.assert_close(y[:n], x[:n] + n)
    keys = {f: {ck.key for ck in f.compiled.values()} for f in (spec, nospec, noalign)}
    assert len(keys[spec]) == 3       # n == 1 a constant, n % 16 == 0 a hint, any other n
    assert len(keys[nospec]) == 1     # one kernel, n always a plain run-time int
    assert len(keys[noalign]) == 2    # n == 1 still a constant; no divisibility hint
    assert "divisible_by" not in next(iter(nospec.compiled.values())).ir
    assert [p.do_not_specialize for p in nospec.params] == [False, False, True, False]
    assert [p.is_constexpr for p in nospec.params] == [False, False, False, True]


def test_positional_constexprs():
    @triton.jit
    def scaled(x, y, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n) * SCALE, mask=offs < n)

    x, y = torch.randn(10), torch.zeros(10)
    scaled[(1,)](x, y, 10, 3.0, 16)                  # every constexpr positional
    torch.testing.assert_close(y, x * 3)
    scaled[(1,)](x, y, 10, 4.0, BLOCK=16, num_warps=2)   # mixed, with an option
    torch.testing.assert_close(y, x * 4)
    scaled.run(x, y, 10, 5.0, 16, grid=(1,))          # Triton's run(*args, grid=...)
    torch.testing.assert_close(y, x * 5)
    ck = scaled.warmup(x, y, 10, 6.0, 16, grid=(1,))
    assert ck.n_regs > 0 and ck.metadata.shared == 0
    with pytest.raises(KernelArgumentError, match="takes 5 arguments, got 6: 6 positional"):
        scaled[(1,)](x, y, 10, 3.0, 16, 7)


def test_gpu_forwards_options_to_triton_compile_and_keys_on_them(monkeypatch):
    real_triton = pytest.importorskip("triton")
    from compiler.jit import kernel_cache  # noqa: PLC0415

    seen = []
    orig = real_triton.compile
    monkeypatch.setattr(real_triton, "compile", lambda *a, **kw: seen.append(dict(kw["options"])) or orig(*a, **kw))
    k = kernel(_double)
    x, y = torch.randn(64), torch.zeros(64)
    tgt = get_target("gpu:sm_90")
    assert {"num_warps", "num_stages", "num_ctas", "maxnreg"} <= tgt.launch_options <= set(LAUNCH)
    with use_target(tgt), compile_only() as built:
        k[(1,)](x, y, 64, BLOCK=64)
        k[(1,)](x, y, 64, BLOCK=64, num_warps=8, num_stages=2, grf_mode="large")
        k[(1,)](x, y, 64, BLOCK=64, num_warps=8, num_stages=2)    # the same specialisation again
    assert len({ck.key for ck in built}) == 2                     # the options are part of the key
    assert len(seen) == 2
    assert seen[0]["num_warps"] == 4 and "num_stages" not in seen[0]
    assert seen[1]["num_warps"] == 8 and seen[1]["num_stages"] == 2 and "grf_mode" not in seen[1]
    # what Triton built: its own metadata, stored in the entry
    md = json.loads(kernel_cache().lookup(built[1].key).file("metadata.json").read_text())
    assert md["num_warps"] == 8 and md["num_stages"] == 2
    with use_target(tgt), numerics("strict"), compile_only():
        k[(1,)](x, y, 64, BLOCK=64, enable_fp_fusion=True)
    assert seen[-1]["enable_fp_fusion"] is False                 # strict never fuses
    assert get_target("gpu:interpret").launch_options == frozenset()
    with use_target("gpu:interpret"):
        k[(1,)](x, y, 64, BLOCK=64, num_warps=8)
    torch.testing.assert_close(y, x * 2)


def _dot(a, b, c, N: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(a + i[:, None] * N + i[None, :])
    y = tl.load(b + i[:, None] * N + i[None, :])
    tl.store(c + i[:, None] * N + i[None, :], tl.dot(x, y) + x * 0.5)


KUNLUN_TRITON = dict(groups_per_cluster=2, is_use_mask_zero=True, isCloseUnrollControl=True, buffer_size_limit=2048,
                     unroll_num=4, isOpenCmpNan=True, exp_range="-10:0")


@pytest.mark.parametrize("target", ["cpu", "gpu:interpret", "kunlun:xpu3"])
def test_kunlun_triton_options_are_accepted_on_every_target(target):
    """The options Kunlun's Triton takes at launch (vllm-kunlun passes the first four) compile and run
    everywhere; those with no meaning on a target leave one compiled kernel."""
    import targets.kunlun  # noqa: PLC0415
    from compiler.target import register_target  # noqa: PLC0415
    register_target("kunlun", targets.kunlun.TARGET)
    k = kernel(_double)
    x, y = torch.randn(40), torch.zeros(40)
    with use_target(target):
        k[(2,)](x, y, 40, BLOCK=32, **KUNLUN_TRITON)
        k[(2,)](x, y, 40, BLOCK=32)
        triton.jit(_double)[(2,)](x, y, 40, BLOCK=32, isCloseVectorization=False, groups_per_cluster=1)
    torch.testing.assert_close(y, x * 2)
    assert len(k.compiled) == 1
    with pytest.raises(KernelArgumentError, match="groups_per_cluster=0 must be a positive int"):
        k[(2,)](x, y, 40, BLOCK=32, groups_per_cluster=0)
    with pytest.raises(KernelArgumentError, match="isCloseVectorization='yes' must be a bool"):
        k[(2,)](x, y, 40, BLOCK=32, isCloseVectorization="yes")
    with pytest.raises(KernelArgumentError, match="'isCloseVectorisation'.*Did you mean 'isCloseVectorization'"):
        k[(2,)](x, y, 40, BLOCK=32, isCloseVectorisation=True)


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_kunlun_honours_close_vectorization_and_memory_async(policy):
    """On kunlun isCloseVectorization leaves no SIMD in the source (the dot's svmac lanes become the scalar
    fma chain: the same bits in strict) and isCloseMemoryAsync no asynchronous DMA; both are part of the
    key there and nowhere else."""
    import targets.kunlun  # noqa: PLC0415
    from compiler import render_only  # noqa: PLC0415
    from compiler.target import register_target  # noqa: PLC0415
    register_target("kunlun", targets.kunlun.TARGET)
    k = kernel(_dot)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    src, out = {}, {}
    for name, opts in (("plain", {}), ("scalar", {"isCloseVectorization": True}),
                       ("sync", {"isCloseMemoryAsync": True})):
        with use_target("kunlun:xpu3"), numerics(policy):
            with render_only() as seen:
                k[(1,)](a, b, torch.empty(16, 16), N=16, **opts)
            out[name] = torch.empty(16, 16)
            k[(1,)](a, b, out[name], N=16, **opts)
        src[name] = seen[0].source
    assert "svmac_float32x16" in src["plain"] and "_ASYNC(" in src["plain"]
    assert "svmac_float32x16" not in src["scalar"] and "vload_lm" not in src["scalar"]
    assert "_ASYNC(" not in src["sync"] and "svmac_float32x16" in src["sync"]
    want = a @ b + a * 0.5
    for name in out:
        torch.testing.assert_close(out[name], want, rtol=1e-5, atol=1e-5)
    if policy == "strict":
        assert torch.equal(out["scalar"], out["plain"]) and torch.equal(out["sync"], out["plain"])
    assert for_target(get_target("kunlun:xpu3"), {"isCloseVectorization": True, "groups_per_cluster": 2}) == \
        (("isCloseVectorization", True),)
    assert for_target(get_target("cpu"), {"isCloseVectorization": True}) == ()
