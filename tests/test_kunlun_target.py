"""kunlun target (host emulation): the example kernels render for xpu2 and xpu3 in the XPU
dialect, build against xpu_emulation.h and match the cpu target (bitwise in strict, within
tolerance in fast); the LM budget refuses configs that do not fit; a dialect lint over every
generated source; the emulation's DMA bounds check and run-time LM check."""
import itertools
import os
import re
import subprocess

import pytest
import torch

import targets.kunlun
from compiler import kernel, language as tl, numerics, use_target
from compiler.target import register_target
from examples import example_kernels as K
import kernels as KL
from targets.kunlun import ARCHS
from targets.kunlun.build import sdk as kunlun_sdk, toolchain
from targets.kunlun.runtime.launcher import KunlunLaunchError

pytestmark = pytest.mark.emulation

register_target("kunlun", targets.kunlun.TARGET)



def _g(seed):
    return torch.Generator().manual_seed(seed)


def _cdiv(a, b):
    return (a + b - 1) // b


# each case: make inputs, launch (returns output tensors); configs sized for ~7 KB of LM per core
def case_add():
    x, y = torch.randn(1000 + 17, generator=_g(1)), torch.randn(1000 + 17, generator=_g(2))

    def run():
        out = torch.empty_like(x)
        ck = K.add_kernel[(_cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return [out], ck
    return run


def case_softmax():
    x = torch.randn((16, 100), generator=_g(3)) * 2

    def run():
        out = torch.empty_like(x)
        ck = K.softmax_kernel[(16,)](x, out, 100, x.stride(0), out.stride(0), BLOCK=128)
        return [out], ck
    return run


def case_softmax_fp16():
    x = (torch.randn((8, 60), generator=_g(4)) * 2).half()

    def run():
        out = torch.empty_like(x)
        ck = K.softmax_kernel[(8,)](x, out, 60, x.stride(0), out.stride(0), BLOCK=64)
        return [out], ck
    return run


def case_layernorm():
    x, w, b = (torch.randn((6, 300), generator=_g(5)) * 2 + 1, torch.randn(300, generator=_g(6)),
               torch.randn(300, generator=_g(7)))

    def run():
        y = torch.empty_like(x)
        ck = K.layernorm_kernel[(6,)](x, w, b, y, 300, x.stride(0), 1e-5, BLOCK=128)
        return [y], ck
    return run


def case_matmul(dtype):
    def make():
        a = torch.randn((17, 45), generator=_g(8)).to(dtype)
        b = torch.randn((45, 33), generator=_g(9)).to(dtype)

        def run():
            c = torch.empty((17, 33), dtype=dtype)
            ck = K.matmul_kernel[(_cdiv(17, 16), _cdiv(33, 16))](
                a, b, c, 17, 33, 45, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
            return [c], ck
        return run
    return make


def case_row_sum_max():
    x = torch.randn((5, 700), generator=_g(10))

    def run():
        s, m = torch.empty(5), torch.empty(5)
        ck = K.row_sum_max_kernel[(5,)](x, s, m, 700, x.stride(0), BLOCK=256)
        return [s, m], ck
    return run


def case_gelu():
    x = torch.randn(999, generator=_g(11)) * 3

    def run():
        out = torch.empty_like(x)
        ck = K.gelu_kernel[(_cdiv(999, 256),)](x, out, 999, BLOCK=256)
        return [out], ck
    return run


def case_silu_bf16():
    x = (torch.randn(777, generator=_g(12)) * 3).bfloat16()

    def run():
        out = torch.empty_like(x)
        ck = K.silu_kernel[(_cdiv(777, 256),)](x, out, 777, BLOCK=256)
        return [out], ck
    return run


def case_embedding():
    idx = torch.randint(0, 50, (10,), generator=_g(13)).to(torch.int32)
    table = torch.randn((50, 100), generator=_g(14))

    def run():
        out = torch.empty((10, 100))
        ck = K.embedding_kernel[(10,)](idx, table, out, 100, table.stride(0), BLOCK_D=64)
        return [out], ck
    return run


def case_transpose():
    x = torch.randn((37, 2 * 21), generator=_g(15))[:, ::2]

    def run():
        out = torch.empty((21, 37))
        ck = K.copy2d_kernel[(_cdiv(37, 16), _cdiv(21, 16))](x, out, 37, 21, x.stride(0), x.stride(1),
                                                              out.stride(1), out.stride(0), BM=16, BN=16)
        return [out], ck
    return run


CASES = {"add": case_add, "softmax": case_softmax, "softmax_fp16": case_softmax_fp16, "layernorm": case_layernorm,
         "matmul_fp32": case_matmul(torch.float32), "matmul_fp16": case_matmul(torch.float16),
         "row_sum_max": case_row_sum_max, "gelu": case_gelu, "silu_bf16": case_silu_bf16,
         "embedding": case_embedding, "transpose": case_transpose}


def _run(target, policy, run):
    with use_target(target), numerics(policy):
        outs, ck = run()
    return outs, ck


@pytest.mark.sampled
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("policy", ["strict", "fast"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_example_kernels_match_cpu(case, policy, arch):
    run = CASES[case]()
    ref, _ = _run("cpu", policy, run)
    got, ck = _run(f"kunlun:{arch}", policy, run)
    assert ck.source.startswith(f"// Generated by tilejit: kernel '{ck.name}', target kunlun:{arch}")
    for r, g in zip(ref, got):
        if policy == "strict":
            assert torch.equal(r.view(torch.uint8) if r.dtype.is_floating_point else r,
                               g.view(torch.uint8) if g.dtype.is_floating_point else g), case
        else:
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5) if r.dtype == torch.float32 else \
                torch.testing.assert_close(g, r)


# ---- library kernels: the kunlun default config, and the cpu target run with that same config -------
def _lib_cases():
    g = _g(20)
    a, b, bias = torch.randn(37, 70, generator=g), torch.randn(70, 45, generator=g), torch.randn(45, generator=g)
    x, r, w, bb = (torch.randn(9, 300, generator=g) * 2 + 1, torch.randn(9, 300, generator=g),
                   torch.randn(300, generator=g), torch.randn(300, generator=g))
    q, k, v = (torch.randn(2, 4, 33, 64, generator=g), torch.randn(2, 2, 40, 64, generator=g),
               torch.randn(2, 2, 40, 64, generator=g))
    q2, k2, v2 = (torch.randn(1, 2, 5, 128, generator=g), torch.randn(1, 2, 20, 128, generator=g),
                  torch.randn(1, 2, 20, 128, generator=g))
    h = torch.float16
    return {
        "matmul_bias_gelu": ("matmul", dict(N=45, K=70), lambda c: KL.matmul(a, b, bias, "gelu", config=c)),
        "matmul_bf16": ("matmul", dict(N=45, K=70),
                        lambda c: KL.matmul(a.bfloat16(), b.bfloat16(), bias.bfloat16(), config=c)),
        "layer_norm": ("layer_norm", dict(N=300), lambda c: KL.layer_norm(x, w, bb, config=c)),
        "rms_norm_fp16": ("rms_norm", dict(N=300), lambda c: KL.rms_norm(x.to(h), w.to(h), config=c)),
        "add_rms_norm": ("add_rms_norm", dict(N=300), lambda c: torch.cat(KL.add_rms_norm(x, r, w, config=c))),
        "attention_causal_gqa": ("attention", dict(head_dim=64, seq_k=40, seq_q=33),
                                 lambda c: KL.attention(q, k, v, causal=True, config=c)),
        "attention_d128_lse": ("attention", dict(head_dim=128, seq_k=20, seq_q=5),
                               lambda c: torch.cat([t.flatten() for t in KL.attention(q2, k2, v2, return_lse=True,
                                                                                       config=c)])),
    }


LIB_CASES = sorted(_lib_cases())


@pytest.mark.sampled
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("policy", ["strict", "fast"])
@pytest.mark.parametrize("case", LIB_CASES)
def test_library_kernels_match_cpu(case, policy, arch):
    """Every library kernel with each target's default config (kunlun's sized for LM) renders, builds
    through the emulation and equals the cpu target: bitwise in strict, where the parameters that fix
    a summation order are one value on every target, within tolerance in fast."""
    from compiler import render_only  # noqa: PLC0415
    op, dims, call = _lib_cases()[case]
    target = f"kunlun:{arch}"
    with use_target(target), numerics(policy):
        with render_only():
            call(None)
        got = call(None)
    with use_target("cpu"), numerics(policy):
        ref = call(None)
    if policy == "strict":
        assert torch.equal(got.view(torch.uint8), ref.view(torch.uint8)), case
    else:
        torch.testing.assert_close(got, ref, rtol=2e-5, atol=2e-5) if ref.dtype == torch.float32 else \
            torch.testing.assert_close(got, ref)


@pytest.mark.no_toolchain
def test_library_defaults_fit_lm_and_so_does_the_shared_space():
    """The kunlun defaults fit the LM budget as the plan counts it; so does the shared config space's
    attention tile (16 x 16 at head_dim 128), which the memory plan strip-mines to fit."""
    from targets.kunlun.tune.footprint import lm_footprint  # noqa: PLC0415
    from compiler import get_target  # noqa: PLC0415
    tgt = get_target("kunlun:xpu3")
    budget = tgt.arch.lm_budget
    for op, dims in (("matmul", dict(N=4096, K=4096)), ("layer_norm", dict(N=4096)),
                     ("attention", dict(head_dim=128, seq_k=1024))):
        cfg = KL.config_for(op, tgt, **dims)
        for policy in ("fast", "strict"):
            assert 0 < lm_footprint(tgt, op, cfg, {"head_dim": dims.get("head_dim", 64)}, policy) <= budget
    assert 0 < lm_footprint(tgt, "attention", {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 128}, {"head_dim": 128},
                            "fast") <= budget


def test_contiguous_tiles_move_by_row_segments():
    """A contiguous 1-D tile is one GM2LM and one LM2GM of the whole block in the unmasked path; the
    masked path splits rows into runs; a strided tile falls back to one transfer per element."""
    x = torch.randn(1000)
    with use_target("kunlun:xpu3"):
        ck = K.add_kernel[(4,)](x, x, torch.empty(1000), 1000, BLOCK=256)
        src = ck.source
        assert re.search(r"GM2LM\(\w+, \w+, \(256\) \* \(int\)sizeof\(float\)\)", src)
        assert re.search(r"LM2GM\(\w+, \w+, \(256\) \* \(int\)sizeof\(float\)\)", src)
        assert "GM2LM(t" in src and "+ s_, (j - s_) * (int)sizeof(float))" in src   # masked runs
        xt = torch.randn((37, 42))[:, ::2]
        ck = K.copy2d_kernel[(3, 2)](xt, torch.empty((21, 37)), 37, 21, xt.stride(0), xt.stride(1), 1, 37,
                                     BM=16, BN=16)
        assert "sizeof(float));" in ck.source and "* (int)sizeof" not in ck.source.split("GM2LM", 1)[1].split("\n")[0]
    # attention's K^T tile is contiguous down its columns: one DMA per column into a row buffer,
    # spread with the tile's stride; nothing in the kernel moves single elements
    from compiler import render_only  # noqa: PLC0415
    q, kv = torch.randn(1, 2, 5, 128), torch.randn(1, 2, 20, 128)
    with use_target("kunlun:xpu3"), render_only() as seen:
        KL.attention(q, kv, kv, causal=True, config={"BLOCK_M": 4, "BLOCK_N": 16, "BLOCK_DK": 16, "BLOCK_DO": 32})
    src = seen[0].source
    assert re.search(r"GM2LM\(\w+, (tr\d+), \(16\) \* \(int\)sizeof\(float\)\); for \(int t_ = 0; t_ < 16; \+\+t_\) "
                     r"\(\w+ \+ r1\)\[\(0 \+ t_\) \* 16\] = \1\[t_\];", src)
    assert not re.search(r"(GM2LM|LM2GM)\([^;]*, sizeof\(", src)   # no per-element transfer


def test_grid_larger_than_the_machine_runs_through_the_stride_loop():
    # 3000 programs > 8 clusters x 64 cores: each core walks several programs
    x, y = torch.randn(3000 * 16), torch.randn(3000 * 16)
    out = torch.empty_like(x)
    with use_target("kunlun:xpu2"):
        K.add_kernel[(3000,)](x, y, out, x.numel(), BLOCK=16)
    assert torch.equal(out, x + y)


def test_tiles_over_lm_are_strip_mined_and_run():
    """BLOCK=1024 needs 12 KB of fp32 tiles, over xpu2's 7 KB: the plan cuts the block into chunks
    that fit (the emitted arena says so, and the emulation checks it at run time)."""
    x, y = torch.randn(4096 + 5), torch.randn(4096 + 5)
    out = torch.empty_like(x)
    with use_target("kunlun:xpu2"):
        ck = K.add_kernel[(5,)](x, y, out, x.numel(), BLOCK=1024)
    assert torch.equal(out, x + y)
    plan = ck.source.split("// memory plan (xpu2): LM arena ", 1)[1]
    arena = int(plan.split(" ", 1)[0])
    assert arena <= ARCHS["xpu2"].lm_budget and "strip-mined: 1024 -> chunks of " in plan
    assert re.search(rf"__simd__ __local__ char tj_lm\[{arena}\]; TJ_LM_USE\(tj_lm\);", ck.source)


def test_fp64_is_computed_in_fp32_with_a_warning():
    """As Kunlun's torch stacks do (docs/kunlun.md, "float64"); compiler/fp64.py's words need no
    `double` in device code (tests/test_float64.py checks the conversions bit for bit)."""
    from targets.kunlun.codegen import lint  # noqa: PLC0415
    x = torch.randn(8, dtype=torch.float64)
    out = torch.empty(8, dtype=torch.float64)
    with use_target("kunlun:xpu3"), pytest.warns(UserWarning, match="computes its float64 values in fp32"):
        ck = K.add_kernel[(1,)](x, x, out, 8, BLOCK=8)
    assert torch.equal(out, (x.float() + x.float()).double())
    assert lint.lint(ck.source) == [] and "double" not in ck.source


@pytest.mark.no_toolchain
def test_dialect_lint_over_the_sources_of_every_case():
    """Every .xpu source of the parity cases above (example and library kernels, both archs and
    policies; rendered, not built) keeps every rule of the dialect lint (targets/kunlun/codegen/lint.py;
    each rule's own failing case is in test_kunlun_fidelity.py), and the device header keeps the
    header rules."""
    from compiler import render_only  # noqa: PLC0415
    from targets.kunlun.codegen import lint  # noqa: PLC0415
    sources = []
    for arch, policy in itertools.product(sorted(ARCHS), ("strict", "fast")):
        with use_target(f"kunlun:{arch}"), numerics(policy), render_only() as seen:
            for case in CASES.values():
                case()()
            for _, _, call in _lib_cases().values():
                call(None)
        sources += [s.source for s in seen]
    assert len(sources) >= 4 * (len(CASES) + len(LIB_CASES))
    for src in sources:
        assert lint.lint(src) == [], src.splitlines()[0]
        assert re.search(r"int tj_rc = \w+<<<(8|12), 64, \(XPUStream\)stream>>>", src)
    header = open(os.path.join(os.path.dirname(targets.kunlun.__file__), "include", "tilejit_xpu.h")).read()
    assert lint.lint_header(header) == [] and lint.device_functions(header)[0] > 50


# ---- the emulation header itself ------------------------------------------------------------
_EMU_SRC = r'''
#include "tilejit_xpu.h"
__global__ void k(__global_ptr__ float* x, int n, int lm_floats) {
    __simd__ __local__ float buf[1024]; TJ_LM_USE(buf);
    if (lm_floats > 1024) { __simd__ __local__ float more[1024]; TJ_LM_USE(more); more[0] = 0; }
    int id = cluster_id() * core_num() + core_id();
    if (id < n) { GM2LM(x + id, &buf[0], sizeof(float)); buf[0] += 1.0f; LM2GM(&buf[0], x + id, sizeof(float)); }
    mfence();
}
extern "C" int run(float* x, int n, int lm_floats) { return tj_emu_launch(8, 64, [=]() { k(x, n, lm_floats); }); }
'''


@pytest.fixture(scope="module")
def emu_lib(tmp_path_factory):
    import ctypes
    d = tmp_path_factory.mktemp("emu")
    (d / "k.xpu").write_text(_EMU_SRC)
    subprocess.run(toolchain.emulation_command(ARCHS["xpu2"], str(d / "k.xpu"), str(d / "k.so")), check=True)
    lib = ctypes.CDLL(str(d / "k.so"))
    lib.run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.tj_emu_error.restype = ctypes.c_char_p
    lib.tj_emu_set_regions.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _regions(lib, t):
    import ctypes
    lo = (ctypes.c_uint64 * 1)(t.data_ptr())
    hi = (ctypes.c_uint64 * 1)(t.data_ptr() + t.numel() * 4)
    lib.tj_emu_set_regions(1, lo, hi)


@pytest.mark.no_toolchain
def test_emulation_runs_every_core_once_and_checks_dma_bounds(emu_lib):
    x = torch.zeros(8 * 64)
    _regions(emu_lib, x)
    assert emu_lib.run(x.data_ptr(), 8 * 64, 0) == 0
    assert torch.equal(x, torch.ones(8 * 64))          # 8 clusters x 64 cores, each once
    small = torch.zeros(100)
    _regions(emu_lib, small)
    assert emu_lib.run(small.data_ptr(), 8 * 64, 0) == -1   # ids >= 100 copy past the tensor
    assert b"outside every tensor" in emu_lib.tj_emu_error()


@pytest.mark.no_toolchain
def test_emulation_checks_live_lm_at_run_time(emu_lib):
    x = torch.zeros(8 * 64)
    _regions(emu_lib, x)
    assert emu_lib.run(x.data_ptr(), 0, 4096) == -1      # 4 KB + 4 KB live > xpu2's 7 KB budget
    assert b"local memory overflow" in emu_lib.tj_emu_error()


@pytest.mark.no_toolchain
def test_kernel_launch_reports_an_emulation_error_as_an_exception():
    import compiler
    from targets.kunlun.runtime.launcher import KunlunLauncher
    assert issubclass(KunlunLaunchError, compiler.errors.TilejitError)
    assert KunlunLauncher   # errors surface through KunlunLaunchError (see the header tests above)


@pytest.mark.no_toolchain
def test_toolchain_falls_back_to_emulation_without_xtdk(monkeypatch):
    monkeypatch.delenv("XTDK_DIR", raising=False)
    if kunlun_sdk.find_xtdk() is None:
        fp = toolchain.fingerprint(ARCHS["xpu3"])
        assert fp["mode"] == "emulation" and fp["arch"] == "xpu3" and fp["cxx"]
        assert "-DTJ_EMU_LM_BUDGET=7168" in fp["flags"]
    assert toolchain.fingerprint(ARCHS["xpu2"]) != toolchain.fingerprint(ARCHS["xpu3"])


def _fake_sdk(root, xdnn=True):
    """An SDK directory layout as public packaging ships it (XTDK, XRE with so/, XDNN): empty files
    and a `clang++` that only answers --version. Nothing is compiled with it."""
    xtdk, xre, xd = root / "xtdk", root / "xre", root / "xdnn"
    (xtdk / "bin").mkdir(parents=True)
    (xtdk / "include" / "xpu" / "kernel").mkdir(parents=True)
    clang = xtdk / "bin" / "clang++"
    clang.write_text("#!/bin/sh\necho 'fake xtdk clang version 0'\n")
    clang.chmod(0o755)
    (xre / "so").mkdir(parents=True)
    (xre / "so" / "libxpurt.so").write_bytes(b"")
    (xre / "include" / "xpu").mkdir(parents=True)
    (xre / "include" / "xpu" / "runtime.h").write_text("")
    if xdnn:
        (xd / "include" / "xpu" / "kernel").mkdir(parents=True)
        (xd / "include" / "xpu" / "kernel" / "cluster.h").write_text("")
    return xtdk, xre, xd


@pytest.mark.no_toolchain
def test_xtdk_build_lines_take_includes_and_the_runtime_from_the_sdk_layout(tmp_path, monkeypatch):
    xtdk, xre, xd = _fake_sdk(tmp_path)
    monkeypatch.setenv("XTDK_DIR", str(xtdk))
    monkeypatch.setenv("XRE_DIR", str(xre))
    monkeypatch.setenv("XDNN_DIR", str(xd))
    monkeypatch.setenv("HOST_SYSROOT", str(tmp_path / "gcc-8.2"))
    monkeypatch.delenv("API_ARCH", raising=False)
    clang = kunlun_sdk.find_xtdk()
    assert clang == str(xtdk / "bin" / "clang++")
    compile_, link = toolchain.xtdk_commands(clang, ARCHS["xpu3"], "k.xpu", str(tmp_path / "out"))
    assert compile_[:2] == [clang, "--xpu-arch=xpu3"] and "-c" in compile_ and "--basename" in compile_
    for flag in ("-fno-builtin", "-ffp-contract=off", "-fxpu-launch-return", f"--sysroot={tmp_path / 'gcc-8.2'}",
                 f"-I{xtdk / 'include'}", f"-I{xre / 'include'}", f"-I{xd / 'include'}", f"-I{toolchain.HEADER_DIR}"):
        assert flag in compile_, flag
    if os.uname().machine == "x86_64":
        assert "--target=x86_64-baidu-linux-gnu" in compile_
    assert "-fopenmp" not in compile_ and "-fopenmp" not in link
    # libxpurt from XRE's so/ dir, found again at run time through the rpath
    assert [f"-L{xre / 'so'}", "-lxpurt", f"-Wl,-rpath,{xre / 'so'}"] == link[link.index("-lxpurt") - 1:link.index("-lxpurt") + 2]
    assert toolchain.fingerprint(ARCHS["xpu3"])["mode"] == "xtdk"
    # a layout without XDNN's headers is refused with the variable to set, before anything runs
    monkeypatch.setenv("XDNN_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(Exception, match="XDNN_DIR.*include/xpu/kernel/cluster.h"):
        toolchain.xtdk_commands(clang, ARCHS["xpu3"], "k.xpu", str(tmp_path / "out"))


@pytest.mark.no_toolchain
def test_dots_use_the_vector_fma_in_both_policies_and_only_fast_vectorises_elementwise():
    """The dot's inner loop is svmac_float32x16 (one rounding: the fma chain 16 lanes at a time) in
    both policies; fast also vectorises elementwise nests, strict keeps those scalar. The parity
    tests above show strict's vector dot bitwise equal to the cpu target's scalar fma chain."""
    from compiler import render_only  # noqa: PLC0415
    a, b = torch.randn(32, 64), torch.randn(64, 32)
    x, w = torch.randn(4, 256), torch.randn(256)
    srcs = {}
    for policy in ("fast", "strict"):
        with use_target("kunlun:xpu3"), numerics(policy), render_only() as seen:
            KL.matmul(a, b)
            KL.rms_norm(x, w)
        srcs[policy] = "\n".join(r.source for r in seen)
    fast, strict = srcs["fast"], srcs["strict"]
    for src in (fast, strict):
        assert "svmac_float32x16(a_mk, b_, c_)" in src and "svmul_float32x16(a_mk" not in src
    assert re.search(r"vstore_lm_float32x16\(&\w+\[i0\], vvmul_float32x16\(svmul_float32x16", fast)
    assert not re.search(r"vv(add|mul|max)_float32x16|svmul_float32x16", strict)


@pytest.mark.compile
def test_fast_norms_accumulate_and_centre_on_the_vector_unit_with_a_scalar_tail():
    """layer_norm's carried sums (acc += x), x - mean (a + (-b): svadd of the negated scalar) and
    where(cols < N, x - mean, 0) (a vector nest when the chunk is in bounds, the scalar select on
    the tail) are vector code in the fast policy; a row length that is not a multiple of BLOCK runs
    the tail and still matches the cpu target."""
    from compiler import render_only  # noqa: PLC0415
    x, w, b = torch.randn(3, 300), torch.randn(300), torch.randn(300)
    with use_target("kunlun:xpu2"), numerics("fast"), render_only() as seen:
        KL.layer_norm(x, w, b, config={"BLOCK": 128})
    src = seen[-1].source
    assert re.search(r"vstore_lm_float32x16\(&(c\d+)\[i0\], vvadd_float32x16\(vload_lm_float32x16\(&\1\[i0\]\)", src)
    assert "svadd_float32x16((-(" in src
    share = float(re.search(r"work per program: \d+ element operations, (\d+)% on the vector unit", src).group(1))
    assert share >= 30, share
    with use_target("kunlun:xpu2"), numerics("fast"):
        got = KL.layer_norm(x, w, b, config={"BLOCK": 128})
    with use_target("cpu"), numerics("fast"):
        want = KL.layer_norm(x, w, b, config={"BLOCK": 128})
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.no_toolchain
def test_inspect_shows_the_xpu_source_and_the_lm_footprint(capsys):
    from compiler.inspect import main  # noqa: PLC0415
    assert main(["examples.example_kernels:add_kernel", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK=256",
                 "-t", "kunlun:xpu2", "--stage", "source"]) == 0
    out = capsys.readouterr().out
    assert "__global__ void add_kernel(" in out and "GM2LM(" in out
    # x and y at their own offsets; the store's staging buffer is written over an operand that dies there
    section = out.split("// ===== LM footprint (kunlun:xpu2) =====\n", 1)[1]
    assert re.search(r"LM \w+ @0: 1024 bytes, float\[256\].*\(x\)\n  LM (\w+) @1024: 1024 bytes.*\(y\)\n"
                     r"  LM \w+ @1024: 1024 bytes, float\[256\], live \d+\.\.\d+, in place over \1", section), section
    assert "total 2048 bytes of LM arena + 1024 stack reserve = 3072 of 8192 bytes per core (xpu2)" in section


@kernel
def _carried_int64(x_ptr, out_ptr, n):
    t = (n * 0).to(tl.int64) - 3000000000   # needs all 64 bits
    hi = (n * 0).to(tl.int64) + 5           # fits 32
    if tl.load(x_ptr) > 0.0:
        t = t + 7
        hi = hi * 2
    i = (n * 0).to(tl.int64)
    while i < 3:
        t = t + 1
        i = i + 1
    tl.store(out_ptr, t)
    tl.store(out_ptr + 1, hi + i)


@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
def test_an_int64_that_an_if_or_a_while_carries_keeps_one_width_across_its_slot(arch):
    """The chip's 64-bit values are narrowed to 32 bits where their uses allow: an if's result and
    what its branches yield (a bisection's bounds, as the sample op keeps them), a while's carried
    value, its block arguments and its yield, are one slot of one width (an if whose branches
    yielded int32 into int64 results was an internal error)."""
    x, out = torch.ones(1), torch.zeros(2, dtype=torch.int64)
    with use_target(f"kunlun:{arch}"):
        _carried_int64[(1,)](x, out, 4)
    assert out.tolist() == [-3000000000 + 7 + 3, 13]
