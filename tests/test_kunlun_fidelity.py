"""What the real XTDK and chip would reject or run wrong, checked without them: each dialect lint
rule fails on a source that breaks it; the emulation fails on each unfenced hazard, on host math
names, and on a generated kernel whose fences are taken out (and passes with them)."""
import ctypes
import os
import re
import subprocess

import pytest
import torch

import targets.kunlun
from compiler import kernel, language as tl, numerics, render_only, use_target
from compiler.target import register_target
from examples import example_kernels as K
from targets.kunlun import ARCHS
from targets.kunlun.build import toolchain
from targets.kunlun.codegen import lint as L
from targets.kunlun.plan import fences as F

pytestmark = pytest.mark.no_toolchain

register_target("kunlun", targets.kunlun.TARGET)
HEADER = os.path.join(os.path.dirname(targets.kunlun.__file__), "include", "tilejit_xpu.h")


def _add_source(policy="fast"):
    x = torch.randn(1000)
    with use_target("kunlun:xpu3"), numerics(policy), render_only() as seen:
        K.add_kernel[(4,)](x, x, torch.empty(1000), 1000, BLOCK=256)
    return seen[0].source


def _program_line(src, what):
    """`src` with the line `what` added at the start of the program body."""
    return src.replace("(void)pid0;", f"{what} (void)pid0;", 1)


# each rule: a change to a clean generated source that breaks exactly it
BREAKS = {
    "gm-deref": lambda s: _program_line(s, "x_ptr[0] = 1.0f;"),
    "dma-direction": lambda s: re.sub(r"GM2LM\((\w+), (\w+),", r"GM2LM(\2, \1,", s, count=1),
    "host-math": lambda s: _program_line(s, "float q_ = expf(1.0f); (void)q_;"),
    "openmp": lambda s: _program_line(s, "\n#pragma omp simd\n"),
    "wide-types": lambda s: _program_line(s, "long q_ = 0; (void)q_;"),
    "stride-loop": lambda s: s.replace("p += cluster_num() * core_num()", "++p"),
    "launch-status": lambda s: s.replace("    return tj_rc;", "    return 0;"),
    "lm-accounted": lambda s: s.replace(" TJ_LM_USE(tj_lm);", ""),
    "cluster-barrier": lambda s: _program_line(s, "sync_cluster();"),   # a kernel without teams
    "async-wait": lambda s: re.sub(r"\bGM2LM\(", "GM2LM_ASYNC(", s, count=1),   # no mfence() after it
}


def test_each_lint_rule_fails_on_a_source_that_breaks_it():
    src = _add_source()
    assert L.lint(src) == []
    # prefetch-wait needs a loop: tests/test_kunlun_prefetch.py breaks it
    assert set(BREAKS) | {"device-functions", "include-order", "prefetch-wait"} == set(L.RULES)
    for rule, brk in BREAKS.items():
        bad = brk(src)
        assert bad != src, rule
        assert rule in {r for r, _ in L.lint(bad)}, rule


def test_the_header_rules_fail_on_a_wrong_header():
    header = open(HEADER).read()
    assert L.lint_header(header) == [] and L.device_functions(header)[0] > 50
    member = "template <> struct tj_lim<long> { static long lo() { return 0; } };"
    assert ("device-functions", "lo") in L.lint_header(header + member)
    assert ("host-math", "fmaf(") in L.lint_header(header.replace("__builtin_rintf(", "fmaf("))
    reordered = header.replace("#include <stdint.h>\n", "", 1).replace('#include "xpu/kernel/xtdk.h"',
                                                                        '#include "xpu/kernel/xtdk.h"\n#include <stdint.h>')
    assert any(r == "include-order" for r, _ in L.lint_header(reordered))


def test_lint_command_reports_violations(tmp_path, capsys):
    good, bad = tmp_path / "good.xpu", tmp_path / "bad.xpu"
    good.write_text(_add_source())
    bad.write_text(BREAKS["host-math"](_add_source()))
    assert L.main([str(good)]) == 0
    assert L.main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "bad.xpu: host-math:" in out and "trigonometric.xpu" in out
    assert L.main([str(tmp_path / "missing.xpu")]) == 2
    assert "missing.xpu: cannot read it (No such file or directory)" in capsys.readouterr().err


# ---- the emulation's fence rules, on hand-written kernels ------------------------------------------
_RULE_SRC = r'''
#include "tilejit_xpu.h"
__global__ void k(__global_ptr__ float* x, int rule, int fenced) {
    __simd__ __local__ char tj_lm[256]; TJ_LM_USE(tj_lm); TJ_LM_ARENA(tj_lm);
    float* const a = (float*)tj_lm;
    if (cluster_id() + core_id() != 0) return;
    GM2LM(x, a, 64);
    if (rule == 0) {          // vector store, then LM2GM
        vstore_lm_float32x16(a, vload_lm_float32x16(a));
        if (fenced) mfence();
        LM2GM(a, x, 64);
    } else if (rule == 1) {   // scalar store (announced), then a vector load
        TJ_LM_SCALAR(a, 64); a[3] = 0.0f;
        if (fenced) mfence_lm();
        vstore_lm_float32x16(a + 16, vload_lm_float32x16(a));
    } else if (rule == 2) {   // vector load, then GM2LM over the same bytes
        vstore_lm_float32x16(a + 16, vload_lm_float32x16(a));
        if (fenced) mfence();
        GM2LM(x, a, 64);
    } else if (rule == 3) {   // vector store, then a scalar read
        vstore_lm_float32x16(a, vload_lm_float32x16(a + 16));
        if (fenced) mfence_lm();
        TJ_LM_SCALAR(a, 64); x[0] = a[0];
    } else if (rule == 4) {   // mfence_lm orders scalar code, not the DMA engine
        vstore_lm_float32x16(a, vload_lm_float32x16(a));
        mfence_lm();
        if (fenced) mfence();
        LM2GM(a, x, 64);
    } else if (rule == 5) {   // an asynchronous GM2LM, then a vector load of its bytes
        GM2LM_ASYNC(x, a + 16, 64);
        mfence_lm();          // orders S and V, does not wait for the DMA
        if (fenced) mfence();
        vstore_lm_float32x16(a, vload_lm_float32x16(a + 16));
    } else if (rule == 6) {   // an asynchronous LM2GM, then a scalar store over its source
        LM2GM_ASYNC(a, x, 64);
        if (fenced) mfence();
        TJ_LM_SCALAR(a, 64); a[0] = 1.0f;
    }
}
extern "C" int run(float* x, int rule, int fenced) { return tj_emu_launch(2, 4, [=]() { k(x, rule, fenced); }); }
'''


def _emulated(source: str, d, arch: str, entry: str, argtypes: list):
    """`source` built by the emulation toolchain in dir `d` and loaded, with `entry`'s argument
    types and the emulation's error and region calls declared."""
    (d / f"{entry}.xpu").write_text(source)
    subprocess.run(toolchain.emulation_command(ARCHS[arch], str(d / f"{entry}.xpu"), str(d / f"{entry}.so")), check=True)
    lib = ctypes.CDLL(str(d / f"{entry}.so"))
    getattr(lib, entry).argtypes = argtypes
    lib.tj_emu_error.restype = ctypes.c_char_p
    lib.tj_emu_set_regions.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


@pytest.fixture(scope="module")
def rules_lib(tmp_path_factory):
    return _emulated(_RULE_SRC, tmp_path_factory.mktemp("fence_rules"), "xpu3", "run",
                     [ctypes.c_void_p, ctypes.c_int, ctypes.c_int])


_IN_FLIGHT = "are still under an asynchronous DMA"
_HAZARDS = [(0, "LM2GM of LM written by vector stores"),
            (1, "vload_lm_float32x16 of LM scalar code touched"),
            (2, "GM2LM over LM a vector load/store has not finished with"),
            (3, "scalar access of a after vector loads/stores"),
            (4, "LM2GM of LM written by vector stores"),
            (5, f"vload_lm_float32x16 of LM scalar code touched: arena bytes 64..67 {_IN_FLIGHT}"),
            (6, f"scalar access of a after vector loads/stores: arena bytes 0..3 {_IN_FLIGHT}")]


@pytest.mark.parametrize("rule, message", _HAZARDS)
def test_the_emulation_fails_on_each_unfenced_hazard(rules_lib, rule, message):
    x = torch.zeros(16)
    lo, hi = (ctypes.c_uint64 * 1)(x.data_ptr()), (ctypes.c_uint64 * 1)(x.data_ptr() + 64)
    rules_lib.tj_emu_set_regions(1, lo, hi)
    assert rules_lib.run(x.data_ptr(), rule, 1) == 0, rules_lib.tj_emu_error()
    rules_lib.tj_emu_set_regions(1, lo, hi)
    assert rules_lib.run(x.data_ptr(), rule, 0) == -1
    err = rules_lib.tj_emu_error().decode()
    assert message in err and "no fence between" in err, err


def test_the_emulation_does_not_build_host_math_names(tmp_path):
    src = tmp_path / "m.xpu"
    src.write_text('#include "tilejit_xpu.h"\n__global__ void k(float* x) { x[0] = expf(x[0]); }\n')
    res = subprocess.run(toolchain.emulation_command(ARCHS["xpu3"], str(src), str(tmp_path / "m.so")),
                         capture_output=True, text=True)
    assert res.returncode != 0 and "poisoned" in res.stderr and "expf" in res.stderr


# ---- a generated kernel with and without its fences ------------------------------------------------
@kernel
def _masked_square_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)   # the masked path writes `other` with scalar stores
    tl.store(out_ptr + offs, x * x + x, mask=m)     # a vector nest, then LM2GM of its result


def _run_source(src, tmp_path, tag, x, out, grid):
    d = tmp_path / tag
    d.mkdir()
    lib = _emulated(src, d, "xpu3", "tj_launch", [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32])
    lo = (ctypes.c_uint64 * 2)(x.data_ptr(), out.data_ptr())
    hi = (ctypes.c_uint64 * 2)(x.data_ptr() + 4 * x.numel(), out.data_ptr() + 4 * out.numel())
    lib.tj_emu_set_regions(2, lo, hi)
    rc = lib.tj_launch(None, grid, 1, 1, x.data_ptr(), out.data_ptr(), x.numel())
    return rc, lib.tj_emu_error().decode()


def test_a_generated_kernel_fails_in_the_emulation_without_the_fences_the_plan_placed(tmp_path, monkeypatch):
    n, block = 16 * 900 + 5, 16            # 901 programs: more than 12 x 64 cores, so cores run several
    x, out = torch.randn(n), torch.empty(n)
    grid = (n + block - 1) // block

    def source():
        with use_target("kunlun:xpu3"), numerics("fast"), render_only() as seen:
            _masked_square_add[(grid,)](x, out, n, BLOCK=block)
        return seen[0].source
    fenced = source()
    assert re.search(r'extern "C" int tj_launch\(void\* stream, int g0, int g1, int g2, __global_ptr__ float\* '
                     r'x_ptr, __global_ptr__ float\* out_ptr, int32_t n\)', fenced)
    listed = re.findall(r"^//     (mfence(?:_lm)? .*)$", fenced, re.M)
    assert any("before V read" in f and "after S write" in f for f in listed), listed   # `other`, then vectors
    assert any("before D read" in f for f in listed), listed                             # vectors, then LM2GM
    assert len(re.findall(r"^\s*mfence(?:_lm)?\(\);$", fenced, re.M)) == len(listed)
    rc, err = _run_source(fenced, tmp_path, "fenced", x, out, grid)
    assert rc == 0, err
    assert torch.equal(out, x * x + x)

    # the same stage, told to place nothing: the source differs only by its fences, and fails
    access, close = F.Fences.access, F.Fences.close
    monkeypatch.setattr(F.Fences, "access", lambda self, a: access(self, a) and None)
    monkeypatch.setattr(F.Fences, "close", lambda self: close(self) and None)
    bare = source()
    assert not re.search(r"^\s*mfence(?:_lm)?\(\);$", bare, re.M)
    strip = re.compile(r"^\s*mfence(?:_lm)?\(\);\n", re.M)
    assert strip.sub("", fenced) == bare
    rc, err = _run_source(bare, tmp_path, "bare", x, out, grid)
    assert rc == -1 and "no fence between" in err, err


@kernel
def _rows_double(x_ptr, out_ptr, n, ROWS: tl.constexpr, COLS: tl.constexpr):
    offs = tl.program_id(0) * ROWS * COLS + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def test_a_tiles_rows_are_one_asynchronous_batch_and_its_wait_is_needed(tmp_path):
    """Where no row is masked, the rows of a [8, 32] tile go out as GM2LM_ASYNC (LM2GM_ASYNC for the
    store) and one mfence() waits for them; taken out, the emulation fails on the vector nest that
    reads the tile while it is in flight."""
    n, rows, cols = 8 * 32 * 40, 8, 32
    x, out = torch.randn(n), torch.empty(n)
    with use_target("kunlun:xpu3"), numerics("fast"), render_only() as seen:
        _rows_double[(n // (rows * cols),)](x, out, n, ROWS=rows, COLS=cols)
    src = seen[0].source
    batch = re.compile(r"((?:GM2LM|LM2GM)_ASYNC\([^\n]*\n(?:\s*\}\n)+)\s*mfence\(\);\n")
    assert len(batch.findall(src)) == 2, src
    assert "of them asynchronous row batches (one mfence each)" in src and L.lint(src) == []
    rc, err = _run_source(src, tmp_path, "batched", x, out, n // (rows * cols))
    assert rc == 0, err
    assert torch.equal(out, x * 2)
    unwaited = batch.sub(r"\1", src)
    assert "async-wait" in {r for r, _ in L.lint(unwaited)}
    rc, err = _run_source(unwaited, tmp_path, "unwaited", x, out, n // (rows * cols))
    assert rc == -1 and _IN_FLIGHT in err, err


def test_the_emulation_build_refuses_a_source_xtdk_would_refuse(tmp_path):
    """The host compiler would build `long` or a GM dereference; the emulation's build runs the lint
    first and refuses, naming the rule (every generated kernel of every test passes through it)."""
    from compiler.errors import TargetError  # noqa: PLC0415
    from targets.kunlun.build import sdk  # noqa: PLC0415
    if sdk.find_xtdk() is not None:
        pytest.skip("XTDK present: the device compiler itself judges the source")
    path = tmp_path / "bad.xpu"
    path.write_text(BREAKS["gm-deref"](_add_source()))
    with pytest.raises(TargetError, match="gm-deref: global memory is reached only through DMA"):
        toolchain.build(ARCHS["xpu3"], str(path), str(tmp_path))
    path.write_text(_add_source())
    assert toolchain.build(ARCHS["xpu3"], str(path), str(tmp_path)) == "emulation"


_WIDEN_SRC = r'''
#include "tilejit_xpu.h"
__global__ void k(__global_ptr__ const uint16_t* h, __global_ptr__ float* out, int n, int fenced) {
    __simd__ __local__ char tj_lm[1024]; TJ_LM_USE(tj_lm); TJ_LM_ARENA(tj_lm);
    float* const a = (float*)tj_lm;
    if (cluster_id() + core_id() != 0) return;
    tj_gm2lm_f16_vector(h, a, n);
    if (fenced) mfence_lm();
    TJ_LM_SCALAR(a, 4 * n); a[0] += 0.0f;   // a scalar touch of the widened run
    mfence();
    LM2GM(a, out, 4 * n);
}
extern "C" int run(const uint16_t* h, float* out, int n, int fenced) {
    return tj_emu_launch(2, 4, [=]() { k(h, out, n, fenced); });
}
'''


@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
def test_fp16_rows_widen_with_vectors_on_xpu3_only(tmp_path, arch):
    """xpu3 widens an fp16 run of a multiple of 32 halves with vector loads (exact, like the scalar
    widening): a scalar touch right after it needs a fence there, and not on xpu2."""
    lib = _emulated(_WIDEN_SRC, tmp_path, arch, "run", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int])
    h = (torch.randn(64, generator=torch.Generator().manual_seed(3)) * 100).half()
    h[:4] = torch.tensor([float("inf"), float("nan"), 6e-8, -0.0])   # specials and a subnormal
    out = torch.empty(64)
    lo = (ctypes.c_uint64 * 2)(h.data_ptr(), out.data_ptr())
    hi = (ctypes.c_uint64 * 2)(h.data_ptr() + 128, out.data_ptr() + 256)
    for fenced in (1, 0):
        lib.tj_emu_set_regions(2, lo, hi)
        rc = lib.run(h.data_ptr(), out.data_ptr(), 64, fenced)
        if fenced or arch == "xpu2":
            assert rc == 0, lib.tj_emu_error()
            assert torch.equal(out.view(torch.int32), h.float().view(torch.int32))
        else:
            assert rc == -1 and b"scalar access of a after vector" in lib.tj_emu_error()


def test_a_fence_placed_ahead_of_a_groups_earlier_accesses_leaves_them_pending():
    """A fence goes at the start of its group, so the group's accesses made before the one that
    asked for it run after it: they stay pending, and a later vector read of them gets its own
    fence."""
    from targets.kunlun.codegen.access import FencedAccess  # noqa: PLC0415

    class Lines:
        def emit(self, line):
            self.lines.append("    " * self.indent + line)

    class Low(FencedAccess, Lines):
        def __init__(self):
            self.lines, self.indent, self.placement = [], 0, {}
            self.init_access()
    low = Low()
    low.note_buffer("x", 0, 64)
    low.note_buffer("y", 64, 64)
    low.begin_group({"x": ("V", True)})
    low.emit("vstore_lm_float32x16(&x[0], v_);")
    low.begin_group()
    low.emit("y[0] = 1.0f;")          # a scalar write of y: no fence needed yet
    low.emit("float t_ = x[0];")      # a scalar read of x after its vector store: mfence_lm, at the group's start
    low.begin_group({"y": ("V", False)})
    low.emit("v_ = vload_lm_float32x16(&y[0]);")   # y's scalar write came after that fence
    assert low.lines == ["vstore_lm_float32x16(&x[0], v_);", "mfence_lm();", "TJ_LM_SCALAR(y, 64);",
                         "TJ_LM_SCALAR(x, 64);", "y[0] = 1.0f;", "float t_ = x[0];", "mfence_lm();",
                         "v_ = vload_lm_float32x16(&y[0]);"]
