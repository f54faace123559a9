"""cpu target: the shape of the generated C++ (fusion, fast path), the helper header's
conversions, and its guards against C's undefined behaviour."""
import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from compiler import CompilationError, kernel, language as tl, numerics
from compiler.errors import TargetError
from targets.cpu import toolchain

pytestmark = pytest.mark.compile


@kernel
def scale_shift(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.sigmoid(x * a + 1.0) * 2.0, mask=m)


def test_elementwise_chain_is_one_loop_nest_with_a_fast_path():
    x = torch.randn(1000)
    y = torch.empty_like(x)
    ck = scale_shift[(8,)](x, y, 1000, 0.5, BLOCK=128)
    torch.testing.assert_close(y, torch.sigmoid(x * 0.5 + 1.0) * 2.0)
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    # no buffer at all: the load, mul/add/sigmoid/mul are all fused into the store's loop nest
    assert body.count("alignas(64)") == 0
    assert body.count("12582912.0f") == 4     # exp's rounding (two uses) in the box's loop and in the masked one
    assert "if (tj_span<int32_t>(" in body    # an unmasked loop over the elements the mask keeps
    assert body.count("#pragma omp simd") >= 2


def test_the_fast_path_loop_vectorises(tmp_path):
    """Tile offsets reach addresses as 64-bit sums (a wrapping int32 sum under -fwrapv hides the
    affine address from the host compiler): the unmasked loop of a 2-D gather vectorises, as the
    compiler's own report says."""
    x = torch.randn(64, 300)
    y = torch.empty(64, 300)
    ck = rows_scaled[(8, 3)](x, y, 64, 300, x.stride(0), BLOCK_R=8, BLOCK_C=128)
    torch.testing.assert_close(y, x * 3.0)
    assert "(int64_t)" in ck.source.split("_program(")[1] and "i1))" in ck.source
    lines = ck.source.split("\n")
    fast = next(i for i, ln in enumerate(lines) if "if (tj_span" in ln) + 1          # 1-based line numbers
    slow = next(i for i, ln in enumerate(lines) if i >= fast and "} else {" in ln) + 1
    assert any(fast < n < slow for n in _vectorised_lines(ck.source, tmp_path))   # the loop that loads and stores


@kernel
def scaled_to_bf16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, (tl.load(x_ptr + offs, mask=m) * 3.0).to(tl.bfloat16), mask=m)


def test_the_whole_chunks_of_a_bf16_store_in_its_box_vectorise(tmp_path):
    """A bf16 store over the box of its mask rounds whole chunks of the row in the header's helper,
    then what is left: the chunks' loop must vectorise (a loop over the chunks that was not a
    counted one kept the host compiler from it, and ran 6x slower)."""
    x = torch.randn(1000)
    y = torch.empty(1000, dtype=torch.bfloat16)
    ck = scaled_to_bf16[(4,)](x, y, 1000, BLOCK=256)
    torch.testing.assert_close(y, (x * 3.0).to(torch.bfloat16), rtol=0, atol=0)
    lines = ck.source.split("\n")
    box = next(i for i, ln in enumerate(lines) if "if (tj_span" in ln) + 1              # 1-based line numbers
    tail = next(i for i, ln in enumerate(lines) if i >= box and ln.strip().startswith("if (hi")) + 1
    assert any(box < n < tail for n in _vectorised_lines(ck.source, tmp_path)), ck.source


def _compiler_report(source: str, tmp_path, option: str) -> str:
    """What the host compiler reports with `option` (-fopt-info-...) on `source`, built as tilejit builds it."""
    src = tmp_path / "k.cpp"
    src.write_text(source)
    flags = [f for f in toolchain.BASE_FLAGS if f != "-shared"] + toolchain.march_flags()
    rep = subprocess.run([toolchain.find_compiler(), *flags, f"-I{toolchain.HEADER_DIR}", "-c", str(src), "-o",
                          str(tmp_path / "k.o"), option], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    return rep.stderr


def _vectorised_lines(source: str, tmp_path) -> list[int]:
    """The lines of `source` whose loops the host compiler reports vectorised, built as tilejit builds it."""
    report = _compiler_report(source, tmp_path, "-fopt-info-vec-optimized")
    return [int(n) for n in re.findall(r"k\.cpp:(\d+):\d+: optimized: loop vectorized", report)]


@kernel
def grouped_scales(w_ptr, s_ptr, y_ptr, GROUP, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    ks = tl.arange(0, BLOCK_K)[:, None]
    ns = tl.arange(0, BLOCK_N)[None, :]
    w = tl.load(w_ptr + ks * BLOCK_N + ns).to(tl.float32)
    tl.store(y_ptr + ks * BLOCK_N + ns, w * tl.load(s_ptr + (ks // GROUP) * BLOCK_N + ns))


def test_a_division_by_a_run_time_scalar_leaves_its_loop_one_version(tmp_path):
    """A weight's group scale `s[k // GROUP]`: the header's integer division has no branch on the
    divisor (0 and -1 are defined without one), so the host compiler does not unswitch the loop on
    it; it did, and the version that ran stayed scalar (int8 dequantisation 1.6x slower)."""
    w = torch.randint(-127, 128, (64, 32), dtype=torch.int8)
    sc = torch.rand(4, 32)
    y = torch.empty(64, 32)
    ck = grouped_scales[(1,)](w, sc, y, 16, BLOCK_K=64, BLOCK_N=32)
    assert torch.equal(y, w.float() * sc.repeat_interleave(16, 0))
    if "__clang__" in toolchain.predefined_macros():
        pytest.skip("reads GCC's loop report (-fopt-info-loop)")
    report = _compiler_report(ck.source, tmp_path, "-fopt-info-loop-optimized")
    assert "Unswitching loop" not in report, report


@kernel
def long_chain(x_ptr, y_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    for _ in tl.static_range(STEPS):
        x = tl.exp(-x) * 0.5 + x * 0.25
    tl.store(y_ptr + offs, x, mask=offs < n)


def test_a_long_chain_of_elementwise_ops_renders():
    """200 exps in a row are one expression per element thousands of ops deep: evaluating it must
    not nest a Python call per op (it ran past the interpreter's recursion limit at 64)."""
    x = torch.randn(100)
    y = torch.empty(100)
    long_chain[(1,)](x, y, 100, STEPS=200, BLOCK=128)
    want = x.double()
    for _ in range(200):
        want = torch.exp(-want) * 0.5 + want * 0.25
    torch.testing.assert_close(y, want.float(), rtol=1e-5, atol=1e-6)


@kernel
def rows_scaled(x_ptr, y_ptr, R, C, sx, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    m = (r < R)[:, None] & (c < C)[None, :]
    x = tl.load(x_ptr + r[:, None] * sx + c[None, :], mask=m)
    tl.store(y_ptr + r[:, None] * C + c[None, :], x * 3.0, mask=m)


@kernel
def centred_squares(x_ptr, out_ptr, n, mean, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        d = tl.where(cols < n, tl.load(x_ptr + cols, mask=cols < n, other=0.0) - mean, 0.0)
        acc += d * d
    tl.store(out_ptr, tl.sum(acc, axis=0))


def test_a_carried_update_over_a_scalar_broadcast_gets_the_fast_path():
    """layer_norm's variance pass: `x - mean` broadcasts a scalar, which moves no load off its
    index, so the loop's update keeps an unmasked (vectorisable) path for chunks in bounds."""
    x, out = torch.randn(1000), torch.empty(1)
    ck = centred_squares[(1,)](x, out, 1000, 0.25, BLOCK=128)
    torch.testing.assert_close(out[0], ((x - 0.25) ** 2).sum(), rtol=1e-5, atol=1e-4)
    loop = ck.source.split("_program(")[1].split("for (uint64_t")[1]
    assert "if (inb" in loop and "(true ?" in loop


@kernel
def wrapped_hash(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    h = (offs + 1000) * 1103515245 + 12345         # wraps in int32, as in Triton
    tl.store(out_ptr + offs, h.to(tl.int64))         # a value, not an address: it keeps the wrap


def test_int32_arithmetic_widened_for_addresses_only():
    out = torch.empty(64, dtype=torch.int64)
    wrapped_hash[(1,)](out, BLOCK=64)
    want = ((torch.arange(64, dtype=torch.int64) + 1000) * 1103515245 + 12345 + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert torch.equal(out, want)


def _header_lib(tmp_path, extra_flags):
    src = tmp_path / "conv.cpp"
    src.write_text('#include "tilejit_cpu.h"\n'
                   'extern "C" float h2f(uint16_t h) { return tj_h2f(h); }\n'
                   'extern "C" uint16_t f2h(float f) { return tj_f2h(f); }\n'
                   'extern "C" float bf2f(uint16_t h) { return tj_bf2f(h); }\n'
                   'extern "C" uint16_t f2bf(float f) { return tj_f2bf(f); }\n'
                   'extern "C" int32_t idiv(int32_t a, int32_t b) { return tj_idiv(a, b); }\n'
                   'extern "C" int32_t imod(int32_t a, int32_t b) { return tj_imod(a, b); }\n'
                   'extern "C" int64_t idiv64(int64_t a, int64_t b) { return tj_idiv(a, b); }\n'
                   'extern "C" uint32_t udiv(uint32_t a, uint32_t b) { return tj_idiv(a, b); }\n'
                   'extern "C" int32_t f2i(float x) { return tj_f2i<int32_t>(x); }\n')
    out = tmp_path / f"conv{len(extra_flags)}.so"
    cmd = [toolchain.find_compiler(), "-O2", "-std=c++17", "-fPIC", "-shared", f"-I{toolchain.HEADER_DIR}",
           *extra_flags, str(src), "-o", str(out)]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(out))
    lib.h2f.argtypes, lib.h2f.restype = [ctypes.c_uint16], ctypes.c_float
    lib.f2h.argtypes, lib.f2h.restype = [ctypes.c_float], ctypes.c_uint16
    lib.bf2f.argtypes, lib.bf2f.restype = [ctypes.c_uint16], ctypes.c_float
    lib.f2bf.argtypes, lib.f2bf.restype = [ctypes.c_float], ctypes.c_uint16
    lib.idiv.argtypes, lib.idiv.restype = [ctypes.c_int32, ctypes.c_int32], ctypes.c_int32
    lib.imod.argtypes, lib.imod.restype = [ctypes.c_int32, ctypes.c_int32], ctypes.c_int32
    lib.idiv64.argtypes, lib.idiv64.restype = [ctypes.c_int64, ctypes.c_int64], ctypes.c_int64
    lib.udiv.argtypes, lib.udiv.restype = [ctypes.c_uint32, ctypes.c_uint32], ctypes.c_uint32
    lib.f2i.argtypes, lib.f2i.restype = [ctypes.c_float], ctypes.c_int32
    return lib


@pytest.mark.no_toolchain
@pytest.mark.parametrize("flags", [[], ["-DTILEJIT_NO_FLOAT16"]], ids=["float16-type", "portable-bits"])
def test_half_conversions_match_numpy(tmp_path, flags):
    lib = _header_lib(tmp_path, flags)
    bits = np.arange(0, 65536, 97, dtype=np.uint16)
    for b in bits:
        want = np.frombuffer(b.tobytes(), dtype=np.float16)[0].astype(np.float32)
        got = lib.h2f(int(b))
        assert (np.isnan(want) and np.isnan(got)) or want == got, hex(b)
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 2000),
                           np.array([0.0, -0.0, 65504, 65519.99, 65520, 1e-8, 2.98e-8, 5.96e-8, np.inf, -np.inf],
                                    dtype=np.float32)]).astype(np.float32)
    for v in vals:
        with np.errstate(over="ignore"):
            want = np.float16(v).view(np.uint16)
        assert lib.f2h(float(v)) == want, v
        want_bf = torch.tensor(float(v), dtype=torch.float32).to(torch.bfloat16).view(torch.int16).item() & 0xFFFF
        assert lib.f2bf(float(v)) == want_bf, v


@pytest.mark.no_toolchain
def test_integer_guards_define_what_c_leaves_undefined(tmp_path):
    lib = _header_lib(tmp_path, [])
    assert lib.idiv(7, 0) == 0
    assert lib.idiv(-(2 ** 31), -1) == -(2 ** 31)     # wraps instead of trapping
    assert lib.idiv(-7, 2) == -3                        # truncation toward zero, as Triton
    assert lib.idiv64(-(2 ** 63), -1) == -(2 ** 63) and lib.udiv(2 ** 32 - 1, 2 ** 32 - 1) == 1
    edges = [0, 1, 2, 3, 7, 16, 128, 2 ** 31 - 1, 2 ** 31 - 2]
    for a in edges + [-v for v in edges] + [-(2 ** 31)]:
        for b in edges + [-v for v in edges] + [-(2 ** 31)]:
            q = 0 if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1)   # toward zero
            q = (q + 2 ** 31) % 2 ** 32 - 2 ** 31                                          # int32 wrap
            r = 0 if b in (0, -1) else a - b * q
            assert (lib.idiv(a, b), lib.imod(a, b)) == (q, r), (a, b)
    assert lib.f2i(float("nan")) == 0 and lib.f2i(1e20) == 2 ** 31 - 1 and lib.f2i(-2.7) == -2


def test_integer_division_by_zero_in_a_kernel_does_not_crash():
    @kernel
    def div(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(out_ptr + r, tl.load(x_ptr + r) // tl.load(y_ptr + r))

    x = torch.tensor([7, -7, 5, 9], dtype=torch.int32)
    y = torch.tensor([2, 2, 0, -3], dtype=torch.int32)
    out = torch.empty_like(x)
    div[(1,)](x, y, out, BLOCK=4)
    assert out.tolist() == [3, -3, 0, -3]


@pytest.mark.no_toolchain
def test_tiles_too_large_for_a_program_are_refused_clearly():
    @kernel
    def big(x_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + r[None, :] * BLOCK + r[:, None])   # read down columns, used twice: a buffer
        tl.store(x_ptr + r[:, None] * BLOCK + r[None, :], v * tl.sum(v, axis=0)[None, :])

    with pytest.raises(CompilationError, match="BLOCK sizes"):
        big.warmup(torch.empty(1), BLOCK=2048)


@kernel
def _centred(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    tl.store(y_ptr + cols, (x - mean).to(y_ptr.dtype.element_ty), mask=cols < N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_contiguous_row_read_by_several_nests_is_read_again_not_copied(dtype):
    """layer_norm's shape: a row loaded once, summed, then used for the output. Each nest reads it
    from memory: no local copy of what was loaded. A bf16 row is widened once, into an fp32 array
    the nests read (widening again in each cost more); a row that is not whole takes the masked
    nests, a whole one the unmasked ones (the store: over the elements its mask keeps)."""
    for n in (256, 200):
        x = torch.randn(256).to(dtype)
        y = torch.empty_like(x)
        ck = _centred[(1,)](x, y, n, BLOCK=256)
        want = x[:n].float() - x[:n].float().sum() / n
        torch.testing.assert_close(y[:n], want.to(dtype))
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    rows = re.findall(r"(\w+) \w+\[256\];", body)   # the 256-element local arrays
    assert rows == ([] if dtype == torch.float32 else ["float"])
    assert len(re.findall(r"if \(inb\d+\) \{", body)) == 1   # the sum's nest: an in-bounds path
    assert len(re.findall(r"if \(tj_span<int32_t>\(", body)) == 1   # the store's: the box of its mask


@kernel
def _read_then_overwritten(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r)
    s = tl.sum(v, axis=0)
    tl.store(x_ptr + r, v * 2.0)   # overwrites what v was read from
    tl.store(y_ptr + r, v + s)     # still the values loaded


def test_a_tile_used_after_a_store_keeps_the_values_it_loaded():
    x = torch.randn(64)
    old = x.clone()
    y = torch.empty(64)
    ck = _read_then_overwritten[(1,)](x, y, BLOCK=64)
    assert torch.equal(x, old * 2.0)
    torch.testing.assert_close(y, old + old.sum(), rtol=1e-6, atol=1e-5)
    assert "[64];" in ck.source.split("_program(")[1]   # the tile is copied: a store comes between its uses


def test_layer_norm_in_place_gives_the_bits_of_a_separate_output():
    from kernels.norm import layer_norm_kernel
    x, w, b = torch.randn(8, 1000), torch.randn(1000), torch.randn(1000)
    y = torch.empty_like(x)
    layer_norm_kernel[(8,)](x, w, b, y, 1000, 1000, 1, 1000, 1e-5, HAS_W=True, HAS_B=True, ONE_CHUNK=True, BLOCK=1024)
    layer_norm_kernel[(8,)](x, w, b, x, 1000, 1000, 1, 1000, 1e-5, HAS_W=True, HAS_B=True, ONE_CHUNK=True, BLOCK=1024)
    assert torch.equal(x, y)


@kernel
def _rows_split_by_division(x_ptr, y_ptr, z_ptr, R, H, sb, sh, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    m = (r < R)[:, None]
    src = ((r // H) * sb + (r % H) * sh)[:, None] + cols[None, :]   # row -> (batch, head)
    x = tl.load(x_ptr + src, mask=m, other=0.0)
    tl.store(y_ptr + r[:, None] * BLOCK_C + cols[None, :], x * 2.0, mask=m)
    tl.store(z_ptr + src, x + 1.0, mask=m)


def test_a_row_index_from_a_division_is_computed_once_per_row():
    """Integer division is not index arithmetic to repeat per element: a row's (batch, head) from
    `r // H` and `r % H`, reaching several nests, is divided once per row into a local array."""
    x = torch.randn(3, 5, 2, 32)[:, :, 1]   # [3, 5, 32] with gaps between heads
    y, z = torch.empty(15, 32), torch.zeros(3, 5, 2, 32)[:, :, 1]   # z: x's strides
    ck = _rows_split_by_division[(2,)](x, y, z, 15, 5, x.stride(0), x.stride(1), BLOCK_R=8, BLOCK_C=32)
    assert torch.equal(y, (x * 2.0).reshape(15, 32)) and torch.equal(z, x + 1.0)
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    assert len(re.findall(r"int32_t \w+\[8\];", body)) == 2   # r // H and r % H, eight rows each


def test_the_launch_abi_has_one_layout_in_the_header_the_compiled_launch_path_and_ctypes(tmp_path):
    """tj_arg, tj_status and tj_range are declared in tilejit_cpu.h (the kernels), in the compiled
    launch path (compiler/fastpath/tjfast.c) and, the two the ctypes launch passes, in
    targets/cpu/launcher.py: their sizes and field offsets must agree, or a launch reads garbage."""
    from compiler.fastpath import fast_module
    from targets.cpu.launcher import Range, Status
    fields = {"tj_status": ("code", "site", "arg", "store", "offset", "lo", "hi", "par"),
              "tj_range": ("base", "lo", "hi")}
    items = ["sizeof(tj_arg)"] + [e for name, fs in fields.items()
                                  for e in [f"sizeof({name})"] + [f"offsetof({name}, {f})" for f in fs]]
    src = tmp_path / "abi.cpp"
    src.write_text('#include "tilejit_cpu.h"\n#include <cstddef>\n'
                   f'extern "C" void layout(int64_t* o) {{ int64_t v[] = {{{", ".join(items)}}}; '
                   f'for (int i = 0; i < {len(items)}; ++i) o[i] = v[i]; }}\n')
    subprocess.run([toolchain.find_compiler(), *toolchain.BASE_FLAGS, *toolchain.march_flags(),
                    f"-I{toolchain.HEADER_DIR}", str(src), "-o", str(tmp_path / "abi.so")], check=True)
    got = (ctypes.c_int64 * len(items))()
    ctypes.CDLL(str(tmp_path / "abi.so")).layout(got)
    header = {"tj_arg": (got[0],), "tj_status": tuple(got[1:10]), "tj_range": tuple(got[10:14])}
    for name, cls in (("tj_status", Status), ("tj_range", Range)):
        assert header[name] == (ctypes.sizeof(cls), *(getattr(cls, f).offset for f in fields[name])), name
    if fast_module() is None:
        pytest.skip("the compiled launch path is unavailable here")
    assert fast_module().ABI_LAYOUT == header


@pytest.mark.no_toolchain
def test_cpu_arch_setting_empty_means_native_and_a_bad_one_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CPU_ARCH", "")
    assert toolchain.march_flags()[0].endswith("=native")
    monkeypatch.setenv("TILEJIT_CPU_ARCH", "-O0 -march=native")
    with pytest.raises(TargetError, match="TILEJIT_CPU_ARCH='-O0 -march=native' is not an architecture name"):
        toolchain.march_flags()
    monkeypatch.setenv("TILEJIT_CPU_ARCH", "no-such-cpu")
    src = tmp_path / "k.cpp"
    src.write_text("int f() { return 1; }\n")
    with pytest.raises(TargetError, match="TILEJIT_CPU_ARCH=no-such-cpu sets -m(arch|cpu)=no-such-cpu"):
        toolchain.build(str(src), str(tmp_path / "k.so"))


@pytest.mark.no_toolchain
def test_fingerprint_names_compiler_flags_and_isa():
    fp = toolchain.fingerprint()
    assert fp["cxx"] and "-fopenmp" in fp["flags"] and fp["isa"]
    assert os.path.isfile(os.path.join(toolchain.HEADER_DIR, "tilejit_cpu.h"))


@kernel
def _dot_tile(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.full((M, N), 0.5, tl.float32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, acc))


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (4, 32, 3), (6, 40, 5), (9, 70, 17), (8, 64, 16)])
def test_dot_register_blocks_and_edges_cover_every_element(M, N, K):
    # integer-valued inputs: every sum is exact, so any missed or doubled element shows
    a = torch.randint(-4, 5, (M, K)).float()
    b = torch.randint(-4, 5, (K, N)).float()
    c = torch.full((M, N), float("nan"))
    _dot_tile[(1,)](a, b, c, M=M, N=N, K=K)
    assert torch.equal(c, a @ b + 0.5)


@kernel
def _columns_tile(x_ptr, out_ptr, sx, R: tl.constexpr, C: tl.constexpr):
    """out[i, j] = x[j, i]: the tile is contiguous down its columns (a K^T tile), and held in a
    buffer (two uses), as a dot's operand is."""
    r, c = tl.arange(0, R), tl.arange(0, C)
    t = tl.load(x_ptr + r[:, None] + c[None, :] * sx)
    tl.store(out_ptr + r[:, None] * C + c[None, :], t)
    tl.store(out_ptr + R * C + r[:, None] * C + c[None, :], -t)


@pytest.mark.parametrize("R,C,dtype", [(8, 8, torch.float32), (16, 64, torch.float32), (4, 16, torch.float32),
                                        (64, 4, torch.float32), (2, 32, torch.float32), (32, 8, torch.float32),
                                        (16, 24, torch.bfloat16), (8, 16, torch.float16)])
def test_a_tile_contiguous_down_its_columns_fills_by_block_transpose(R, C, dtype):
    """8x8 register transposes where the tile has them (halves widened exactly), element copies on
    its edges: a copy either way, so every element is exact."""
    x = torch.randn(C, R + 3).to(dtype)   # rows of x are the tile's columns, with a gap between them
    out = torch.full((2, R, C), float("nan"), dtype=dtype)
    ck = _columns_tile[(1,)](x, out, x.stride(0), R=R, C=C)
    assert torch.equal(out[0], x[:, :R].t()) and torch.equal(out[1], -x[:, :R].t())
    assert "tj_fill_transposed<" in ck.source


@kernel
def _column_dots(a_ptr, x_ptr, order_ptr, out_ptr, sx, steps, R: tl.constexpr, C: tl.constexpr):
    """out = sum over the steps of a @ (the column tile at x[order[s] * C:]^T): a K^T tile read once
    per iteration of a run-time loop, at a place a table picks (so a stride guess can be wrong)."""
    r, c = tl.arange(0, R), tl.arange(0, C)
    a = tl.load(a_ptr + r[:, None] * R + r[None, :])
    acc = tl.zeros((R, C), dtype=tl.float32)
    for s in range(0, steps):
        at = tl.load(order_ptr + s)
        t = tl.load(x_ptr + r[:, None] + (at * C + c[None, :]) * sx)
        acc = tl.dot(a, t, acc)
    tl.store(out_ptr + r[:, None] * C + c[None, :], acc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_column_tile_in_a_loop_prefetches_the_next_one_and_stays_exact(dtype):
    """In a run-time loop the transposing fill is told where the next iteration's tile should lie
    (the last stride, kept in a slot declared before the loop) and prefetches it; outside a loop it
    is told nothing. Prefetching is only a hint: tiles at irregular places (a wrong guess), and a
    guess past the end of x on the last step, leave every element exact."""
    R, C, blocks = 16, 16, 6
    x = torch.randint(-8, 9, (blocks * C, R + 1)).to(dtype)   # small integers: every sum is exact
    a = torch.randint(-3, 4, (R, R)).to(dtype)
    out = torch.empty(R, C)
    for order in ([0, 1, 2, 3, 4, 5], [5, 0, 3, 3, 1, 4]):
        ck = _column_dots[(1,)](a, x, torch.tensor(order, dtype=torch.int32), out, x.stride(0), len(order), R=R, C=C)
        want = sum(a.float() @ x[i * C:(i + 1) * C, :R].float().t() for i in order)
        assert torch.equal(out, want)
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    slot = re.search(r"const void\* (last\d+) = nullptr;", body)
    assert slot and body.index(slot.group(0)) < body.index("tj_trip_count")   # before the run-time loop
    assert re.search(rf"const ptrdiff_t (ahead\d+) = tj_ahead\(&{slot.group(1)}, cols\d+\[0\]\);", body)
    # bf16: the columns' k pairs move as 32-bit words (8 pair rows)
    assert re.search(r"tj_fill_transposed<\d>\(\(?\w+\*?\)?\w+, cols\d+, (16|8), 16, ahead\d+\);", body)
    outside = _columns_tile[(1,)](x, torch.empty(2, R, C, dtype=dtype), x.stride(0), R=R, C=C).source
    assert re.search(r"tj_fill_transposed<\d>\(\w+, cols\d+, 16, 16, 0\);", outside) and "tj_ahead" not in outside


def test_the_bounds_checked_mode_checks_each_element_of_a_column_tile():
    from compiler import use_target
    from compiler.errors import KernelBoundsError
    from targets.cpu import CPUTarget
    x = torch.randn(16, 8)
    out = torch.empty(2, 8, 16)
    with use_target(CPUTarget(bounds_check=True)):
        ck = _columns_tile[(1,)](x, out, 8, R=8, C=16)
        assert torch.equal(out[0], x.t()) and "tj_fill_transposed" not in ck.source
        with pytest.raises(KernelBoundsError, match="x_ptr"):
            _columns_tile[(1,)](x, out, 9, R=8, C=16)   # the last columns run past x


def test_a_bounds_checked_target_does_not_reuse_unchecked_kernels():
    """Two cpu target instances share a name; the launch key tells a checked one apart, so the
    same specialisation launched under each runs its own code (first and warm launches)."""
    from compiler import use_target
    from compiler.errors import KernelBoundsError
    from targets.cpu import CPUTarget
    x, out = torch.randn(16, 8), torch.empty(2, 8, 16)
    assert "tj_bc(" not in _columns_tile[(1,)](x, out, 8, R=8, C=16).source
    for _ in range(2):
        with use_target(CPUTarget(bounds_check=True)):
            assert "tj_bc(" in _columns_tile[(1,)](x, out, 8, R=8, C=16).source
            with pytest.raises(KernelBoundsError, match="x_ptr"):
                _columns_tile[(1,)](x, out, 9, R=8, C=16)
    assert "tj_bc(" not in _columns_tile[(1,)](x, out, 8, R=8, C=16).source


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_matmul_with_a_transposed_weight_equals_the_contiguous_one(policy):
    """x @ weight.t() (nn.Linear's layout) reads B down its columns through the block transpose:
    the bits equal those of the same B made contiguous, edges included (N, K not multiples of 8)."""
    import kernels
    from compiler import numerics
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(37, 203, generator=g), torch.randn(150, 203, generator=g)
    with numerics(policy):
        assert torch.equal(kernels.matmul(x, w.t()), kernels.matmul(x, w.t().contiguous()))


# -- fast-policy fp32 sums: 64 partial sums in a fixed order, whatever the vector width -----------
@kernel
def _sums(x_ptr, out_ptr, N: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + cols), axis=0))
    rows = tl.arange(0, ROWS)
    tile = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(out_ptr + 1 + rows, tl.sum(tile * 2.0, axis=1))


def _sum_in_64_lanes(x: torch.Tensor) -> torch.Tensor:
    """The cpu fast policy's order: partial l adds x[l], x[64 + l], ... from 0, then the halves fold."""
    part = torch.zeros(64)
    for c in range(x.shape[0] // 64):
        part = part + x[c * 64:(c + 1) * 64]
    w = 32
    while w:
        part = torch.cat([part[:w] + part[w:2 * w], part[2 * w:]])
        w //= 2
    return part[0]


def test_fast_fp32_sums_run_in_64_lanes():
    N, ROWS = 256, 4
    x = torch.randn(ROWS * N) * torch.logspace(-3, 3, ROWS * N)   # magnitudes where the order shows
    out = torch.empty(1 + ROWS)
    ck = _sums[(1,)](x, out, N=N, ROWS=ROWS)
    assert len(re.findall(r"float chunk\d+_\d\[32\];", ck.source)) == 2   # the loaded row is summed in place
    assert torch.equal(out[0], _sum_in_64_lanes(x[:N]))
    for r in range(ROWS):
        assert torch.equal(out[1 + r], _sum_in_64_lanes(x[r * N:(r + 1) * N] * 2.0)), r


@kernel
def _widened_sum_then_reuse(x_ptr, s_ptr, y_ptr, N, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(tl.zeros([BLOCK], dtype=tl.float32) + x, axis=0)
    tl.store(s_ptr, s)
    tl.store(y_ptr + cols, x - s, mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("N", [256, 219])
@pytest.mark.parametrize("row", ["random", "negative zeros"])
def test_a_sum_in_lanes_reads_its_row_once_with_the_same_bits(dtype, N, row):
    """A 16-bit row widened to fp32 and kept for later use is stored by the loop of the in-lanes sum
    that reads it first (one pass, not a fill loop and a summing loop), in the in-bounds and the
    masked path; an fp32 row in an array is summed from there (no copy into a chunk). The `+0.0 +` before the sum is left out: partials that start at +0.0 make it change no
    bit. The sum is the 64-lane order's, +0.0 for a row of -0.0, and the later use reads the row."""
    BLOCK = 256
    x = (torch.randn(N) * torch.logspace(-3, 3, N)).to(dtype) if row == "random" else torch.full((N,), -0.0, dtype=dtype)
    s, y = torch.empty(1), torch.empty(N)
    ck = _widened_sum_then_reuse[(1,)](x, s, y, N, BLOCK=BLOCK)
    assert "0.0f +" not in ck.source
    if dtype == torch.float32:
        # (the row is read into an array, as the store of s comes between the load and x - s)
        assert re.search(r"tj_f32x64_add_half\(part\d+, \(v\d+ \+ c \* 64\), 0\);", ck.source), ck.source
    else:
        buf = re.search(r"float (v\d+)\[256\];", ck.source).group(1)
        lines = ck.source.splitlines()
        fills = [i for i, ln in enumerate(lines) if f"{buf}[i0] = " in ln]
        assert fills and all(re.search(r"chunk\d+_\d\[l\] = ", lines[i + 1]) for i in fills), ck.source
    wide = torch.zeros(BLOCK)
    wide[:N] = x.float()
    want = _sum_in_64_lanes(wide)
    assert torch.equal(s.view(torch.int32), want.view(1).view(torch.int32))
    assert torch.equal(y.view(torch.int32), (x.float() - want).view(torch.int32))


def _avx512() -> bool:
    return "__AVX512F__" in toolchain.predefined_macros()


@pytest.mark.integration
@pytest.mark.skipif(not _avx512(), reason="this CPU has no AVX-512: there is no wider vector to compare AVX2 with")
def test_fast_fp32_norms_and_attention_give_the_same_bits_with_avx2_and_avx512(tmp_path):
    """The fast sums' order is fixed by the 64 partials, not by the vector width, so a cache built
    for x86-64-v3 (AVX2) computes the bits the native AVX-512 build does (whose norms and
    log_softmax loops run 512 bits wide there)."""
    code = ("import hashlib, torch, kernels, kernels.sampling\n"
            "g = torch.Generator().manual_seed(4)\n"
            "h = hashlib.sha256()\n"
            "x, w, b = (torch.randn(s, generator=g) for s in ((8, 1000), (1000,), (1000,)))\n"
            "q, k, v = (torch.randn(2, 4, 128, 64, generator=g) for _ in range(3))\n"
            "for y in (kernels.layer_norm(x, w, b), kernels.rms_norm(x, w),\n"
            "          kernels.attention(q, k, v, causal=True), kernels.sampling.log_softmax(x * 8.0)):\n"
            "    h.update(y.numpy().tobytes())\n"
            "print(h.hexdigest())\n")
    digests = []
    for arch in ("native", "x86-64-v3"):
        env = {**os.environ, "TILEJIT_CPU_ARCH": arch, "TILEJIT_CACHE_DIR": str(tmp_path / arch)}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.split()[-1])
    assert digests[0] == digests[1]


@kernel
def _bf16_products(a_ptr, b_ptr, p_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m)
    tl.store(p_ptr + offs, a.to(tl.bfloat16) * tl.load(b_ptr + offs, mask=m), mask=m)   # bf16 mul: rounds
    tl.store(c_ptr + offs, a.to(tl.bfloat16), mask=m)                                  # narrowing cast


@pytest.mark.parametrize("n", [512, 1024], ids=["masked", "in-bounds"])
def test_a_just_rounded_bf16_is_stored_by_its_high_half_with_the_same_bits(n):
    """A value the kernel has just rounded to bf16 (a narrowing cast, bf16 arithmetic) is stored
    by its high half, without a second rounding; the bits are torch's round-to-nearest-even, ties,
    NaN, inf and subnormals included."""
    special = torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8), float("nan"), float("inf"),
                            -float("inf"), 3.4e38, 1e-39, -1e-40, 0.0, -0.0, 2 ** -133])
    a = torch.cat([special, torch.randn(n - 12) * torch.logspace(-30, 30, n - 12)])
    b = torch.randn(a.numel()).to(torch.bfloat16)
    p, c = torch.empty_like(b), torch.empty_like(b)
    ck = _bf16_products[(1,)](a, b, p, c, a.numel(), BLOCK=1024)
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    assert "tj_bf16_bits(" in body and "tj_f2bf(" not in body and "tj_store_bf16(" not in body
    want_c = a.to(torch.bfloat16)
    want_p = (want_c.float() * b.float()).to(torch.bfloat16)
    for got, want in ((c, want_c), (p, want_p)):
        num = ~want.isnan()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.view(torch.int16)[num], want.view(torch.int16)[num])   # -0.0 too


@kernel
def _narrow_copies(x_ptr, y_ptr, w_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.5)
    tl.store(y_ptr + offs, x, mask=m)                                            # a load, stored
    t = tl.reshape(tl.trans(tl.reshape(x, (BLOCK // 16, 16))), (BLOCK,))         # views of it
    tl.store(w_ptr + offs, tl.where(offs % 3 == 0, t, -2.0), mask=m)              # selected with a constant


@pytest.mark.parametrize("n", [500, 512], ids=["masked", "in-bounds"])
def test_a_loaded_bf16_is_stored_with_its_own_bits(n):
    """A bf16 value the kernel loaded (moved through views, selected with a constant of bf16) is
    stored by its 16 bits, without rounding: a copy keeps every bit, signalling NaNs and their
    payloads included (a rounding store would set their quiet bit), as a GPU's copy does."""
    bits = torch.randint(-2 ** 15, 2 ** 15, (512,), generator=torch.Generator().manual_seed(4), dtype=torch.int16)
    bits[:6] = torch.tensor([0x7F81, -0x7F, 0x7FC1, 0x0001, -0x8000, 0x7F80], dtype=torch.int16)  # sNaN, -sNaN, ...
    x = bits.view(torch.bfloat16)
    y = torch.zeros(512, dtype=torch.bfloat16)
    w = torch.zeros(512, dtype=torch.bfloat16)
    ck = _narrow_copies[(1,)](x, y, w, n, BLOCK=512)
    body = ck.source.split("_program(")[1].split('extern "C"')[0]
    assert "tj_f2bf(" not in body and "tj_store_bf16(" not in body
    assert torch.equal(y.view(torch.int16)[:n], bits[:n])
    xm = torch.where(torch.arange(512) < n, x, torch.tensor(0.5, dtype=torch.bfloat16))   # other=0.5 past n
    t = xm.view(32, 16).t().reshape(-1)
    want = torch.where(torch.arange(512) % 3 == 0, t.view(torch.int16), torch.tensor(-2.0).bfloat16().view(torch.int16))
    assert torch.equal(w.view(torch.int16)[:n], want[:n])


@kernel
def _few_rows_dot(a_ptr, b_ptr, idx_ptr, c_ptr, K, N, M: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, BK), tl.arange(0, BN)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    rows = tl.load(idx_ptr + rk)                          # which row of B each k reads
    b = tl.load(b_ptr + rows[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("rows, K, N", [("ascending", 64, 64), ("every_third", 64, 64), ("permuted", 64, 64),
                                        ("ascending", 50, 64), ("ascending", 64, 40)])
def test_a_dot_with_few_rows_reads_b_in_place_with_the_copys_bits(rows, K, N):
    """B of a dot with few rows of A is read where it lies when its rows are equally spaced and
    in bounds; rows gathered in any other order, or an edge tile, take the copy. Every case gives
    the bits of the bounds-checked target, which always copies."""
    from compiler import use_target
    from targets.cpu import CPUTarget
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 64, generator=g)
    b = torch.randn(200, N, generator=g)
    idx = {"ascending": torch.arange(64), "every_third": torch.arange(64) * 3,
           "permuted": torch.randperm(64, generator=g)}[rows].to(torch.int32)
    outs = []
    for tgt in (CPUTarget(), CPUTarget(bounds_check=True)):
        c = torch.zeros(2, 64)
        with use_target(tgt):
            ck = _few_rows_dot[(1,)](a, b, idx, c, K, N, M=2, BK=64, BN=64)
        outs.append((c, ck.source))
    (fast, src), (checked, checked_src) = outs
    assert "tj_rows_strided(" in src and "tj_rows_strided(" not in checked_src
    assert torch.equal(fast.view(torch.int32), checked.view(torch.int32))
    want = a[:, :K].double() @ b[idx[:K].long()][:, :N].double()
    torch.testing.assert_close(fast[:, :N].double(), want, rtol=1e-5, atol=1e-5)


@kernel
def _rows_to_bf16(x_ptr, y_ptr, stride_y, R: tl.constexpr, C: tl.constexpr):
    r, c = tl.arange(0, R), tl.arange(0, C)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :])
    tl.store(y_ptr + r[:, None] * stride_y + c[None, :], x.to(tl.bfloat16))


def _f2bf_bits(x: torch.Tensor) -> torch.Tensor:
    """The header's tj_f2bf on fp32 bits, in int64 arithmetic: nearest even; a NaN keeps its high
    half with the quiet bit set."""
    u = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return torch.where(x.isnan(), (u | 0x400000) >> 16, rounded) & 0xFFFF


@pytest.mark.parametrize("R,C", [(1, 64), (3, 128), (2, 80), (4, 48), (2, 24)])
def test_a_contiguous_bf16_store_rounds_a_chunk_at_a_time_with_the_per_element_bits(R, C):
    """An unmasked bf16 tile contiguous along its rows is stored through the header's vector
    rounding (tj_store_bf16), 64 values or a whole row (a multiple of 16) at a time; a row of 24
    keeps the per-element store. Ties, the largest finite values (which round to inf), subnormals,
    -0.0, inf and NaNs, quiet and signalling, with payloads, land in vectors with and without a NaN,
    and every bit is the per-element conversion's."""
    special = torch.tensor([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00008000, 0x80018000, 0x007FFFFF,
                            0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFA00000, 0x7FC12345],
                           dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.randn(R * C) * torch.logspace(-40, 38, R * C)
    x[:special.numel()] = special[:R * C]
    x[-1] = float("nan")
    stride = C + 8
    y = torch.full((R, stride), 7, dtype=torch.int16).view(torch.bfloat16)
    ck = _rows_to_bf16[(1,)](x, y, stride, R=R, C=C)
    assert ("tj_store_bf16(" in ck.source) == (C % 16 == 0)
    got = y.view(torch.int16)[:, :C].to(torch.int64) & 0xFFFF
    assert torch.equal(got, _f2bf_bits(x).view(R, C))
    assert (y.view(torch.int16)[:, C:] == 7).all()   # the row padding is not written


@kernel
def _carried_to_bf16(x_ptr, y_ptr, z_ptr, steps, R: tl.constexpr, C: tl.constexpr):
    r, c = tl.arange(0, R), tl.arange(0, C)
    acc = tl.zeros((R, C), dtype=tl.float32)
    for _ in range(steps):   # a loop-carried tile: an fp32 array in the program
        acc += tl.load(x_ptr + r[:, None] * C + c[None, :])
    tl.store(y_ptr + r[:, None] * C + c[None, :], acc.to(tl.bfloat16))
    tl.store(z_ptr + r[:, None] * C + c[None, :], acc)


@pytest.mark.parametrize("R,C", [(2, 64), (3, 48)])
def test_a_bf16_store_of_an_fp32_array_rounds_the_array_in_place_with_the_per_element_bits(R, C):
    """A bf16 tile rounded from an fp32 array (a dot's accumulator, a loop-carried tile) hands the
    array's row to the header's rounding where it lies, not through a chunk copied from it (a wide
    store read back in halves stalls); every bit is the per-element conversion's of the fp32 values
    the kernel also stores, NaNs and values that round to inf included."""
    x = torch.randn(R * C) * torch.logspace(-40, 38, R * C)
    x[:4] = torch.tensor([float("nan"), float("inf"), -3.3895313892515355e38, 1.0039062])
    y = torch.empty(R, C, dtype=torch.bfloat16)
    z = torch.empty(R, C)
    ck = _carried_to_bf16[(1,)](x, y, z, 1, R=R, C=C)
    assert re.search(r"tj_store_bf16\([^;]*, &\w+\[", ck.source), ck.source
    assert torch.equal(y.view(torch.int16).to(torch.int64) & 0xFFFF, _f2bf_bits(z.view(-1)).view(R, C))


@kernel
def _exp_sum_plus_max(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr, tl.sum(tl.exp(x), axis=0) + tl.max(x, axis=0))


def test_a_kernel_with_reductions_is_built_with_wide_vectors_where_no_sum_follows_the_width():
    """A sum in 64 partials, a max and the strict tree give the same bits at any vector width, so
    their kernel's loops take the host's widest vectors; a fast sum of 32 lanes is an omp simd
    reduction whose lanes are the vector's, and keeps its kernel at 256 bits."""
    x = torch.randn(64)
    out = torch.empty(1)
    for block, policy, wide in ((64, "fast", True), (32, "fast", False), (32, "strict", True)):
        with numerics(policy):
            ck = _exp_sum_plus_max[(1,)](x, out, BLOCK=block)
        torch.testing.assert_close(out[0], x[:block].exp().sum() + x[:block].max(), rtol=1e-5, atol=1e-5)
        assert ("#define TILEJIT_WIDE_VECTORS" in ck.source) == wide, (block, policy)


@kernel
def _count_above(x_ptr, out_ptr, n, t, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        if tl.load(x_ptr + start) > t:   # a block skipped: the carried tile is the if's result, copied into its slot
            cols = start + tl.arange(0, BLOCK)
            acc += tl.where(tl.load(x_ptr + cols, mask=cols < n, other=0.0) > t, 1.0, 0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))   # a float sum of 32 lanes: the kernel keeps 256-bit vectors


def test_a_carried_tile_is_copied_in_the_vectors_its_loops_store(tmp_path):
    """A loop's carried tile is stored by 256-bit vector loops, then copied into its slot: built as
    tilejit builds it, the copy uses 256-bit moves too, never 512-bit ones (a 512-bit load of two
    256-bit stores waits for them to reach the cache: a tenth of the sample op's time)."""
    if "__AVX512F__" not in toolchain.predefined_macros():
        pytest.skip("the build's ISA has no AVX-512: no move is wider than the loops' vectors")
    cxx, arch = toolchain.find_compiler(), toolchain.march_flags()
    if not toolchain.move_flags(cxx, arch, wide_vectors=False):
        pytest.skip(f"{cxx} does not take {' '.join(toolchain.NARROW_MOVES)} (GCC 12 or later does)")
    x = torch.randn(1000)
    out = torch.zeros(1)
    ck = _count_above[(1,)](x, out, 1000, 0.5, BLOCK=32)
    blocks = torch.nn.functional.pad(x, (0, 24), value=0.0).view(-1, 32)
    assert out.item() == int(((blocks > 0.5).sum(1) * (blocks[:, 0] > 0.5)).sum())
    assert "TILEJIT_WIDE_VECTORS" not in ck.source
    src = tmp_path / "k.cpp"
    src.write_text(ck.source)
    flags = [f for f in toolchain.BASE_FLAGS if f != "-shared"] + arch
    asm = subprocess.run([cxx, *flags, *toolchain.move_flags(cxx, arch, wide_vectors=False), f"-I{toolchain.HEADER_DIR}",
                          "-S", str(src), "-o", "-"], capture_output=True, text=True, check=True).stdout
    assert "tj_copy" not in ck.source and "memcpy" in ck.source
    assert "%zmm" not in asm
    assert toolchain.move_flags(cxx, arch, wide_vectors=True) == []
    assert not toolchain._accepts(cxx, ("-mno-such-option-here",))
