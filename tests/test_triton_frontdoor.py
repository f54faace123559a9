"""The Triton front door (compiler.triton): its surface, the math/libdevice namespaces, the driver
stubs, triton.testing, the alias that serves it as `triton` (function, environment variable,
`python -m compiler.as_triton`) while the gpu target keeps the real Triton, and kernel() of a
real triton.JITFunction."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from tiers import on_targets
import torch

import compiler
from compiler import kernel, triton, use_target
from compiler import language as ours
from compiler.errors import CompilationError
from compiler.triton import language as tl

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_surface_and_version():
    from packaging.version import Version  # noqa: PLC0415
    assert Version(triton.__version__) >= Version("3.0")
    assert triton.cdiv(10, 4) == 3 and triton.cdiv(8, 4) == 2
    assert [triton.next_power_of_2(n) for n in (0, 1, 2, 3, 100, 1024, 1025)] == [1, 1, 2, 4, 128, 1024, 2048]
    for name in ("jit", "autotune", "heuristics", "Config", "JITFunction", "KernelInterface", "OutOfResources"):
        assert hasattr(triton, name)
    # the very objects of the tile language
    assert tl.load is ours.load and tl.constexpr is ours.constexpr and tl.float32 is ours.float32
    assert tl.core is ours
    with pytest.raises(AttributeError, match="not part of tilejit's tile language"):
        tl.no_such_builtin  # noqa: B018


@pytest.mark.compile
def test_math_and_libdevice_names_map_to_builtins():
    from compiler.triton.language.extra import cuda, libdevice  # noqa: PLC0415
    assert tl.math.exp is ours.exp and tl.math.rsqrt is ours.rsqrt and tl.math.exp2 is ours.exp2
    assert libdevice.rsqrt is ours.rsqrt and cuda.libdevice.rsqrt is ours.rsqrt
    assert libdevice.fast_expf is ours.exp and libdevice.sqrt_rn is ours.sqrt
    assert "erfinv" in dir(libdevice)
    with pytest.raises(AttributeError):
        libdevice.not_a_libdevice_function  # noqa: B018

    @triton.jit
    def uses_libdevice(x, y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x + offs)
        tl.store(y + offs, libdevice.fast_expf(v) + tl.math.rsqrt(v) + cuda.libdevice.sqrt_rn(v))

    x = torch.rand(16) + 0.5
    y = torch.empty(16)
    uses_libdevice[(1,)](x, y, BLOCK=16)
    torch.testing.assert_close(y, x.exp() + x.rsqrt() + x.sqrt(), rtol=1e-5, atol=1e-5)


def test_a_name_without_a_builtin_imports_and_refuses_at_the_call():
    from compiler.triton.language.extra.libdevice import cyl_bessel_i0  # noqa: PLC0415

    @triton.jit
    def bessel(x, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x + offs, cyl_bessel_i0(tl.load(x + offs)))

    with pytest.raises(CompilationError) as e:
        bessel[(1,)](torch.zeros(4), BLOCK=4)
    msg = str(e.value)
    assert "libdevice.cyl_bessel_i0 is not supported yet" in msg and "in kernel 'bessel'" in msg
    assert "cyl_bessel_i0(tl.load" in msg   # the source line of the call


@pytest.mark.compile
def test_jit_function_surface():
    def body(x, y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)

    k = triton.jit(body)
    assert isinstance(k, triton.JITFunction) and isinstance(k, triton.KernelInterface)
    assert k.fn is body and k.arg_names == ["x", "y", "n", "BLOCK"] and k.__name__ == "body"
    assert "def body" in k.src and len(k.cache_key) == 64
    x, y = torch.randn(8), torch.zeros(8)
    k.run(x, y, 8, BLOCK=8, grid=(1,), num_warps=4)
    torch.testing.assert_close(y, x + 1)
    with pytest.raises(TypeError, match="launched with a grid"):
        k(x, y, 8, BLOCK=8)
    with pytest.raises(TypeError, match="needs grid="):
        k.run(x, y, 8, BLOCK=8)


def test_driver_answers_for_the_current_target():
    drv = triton.runtime.driver.active
    assert drv.get_active_torch_device() == torch.device("cpu")
    t = drv.get_current_target()
    assert t.backend == "cpu" and t.warp_size == 1
    props = drv.utils.get_device_properties(drv.get_current_device())
    assert {"max_shared_mem", "multiprocessor_count", "max_num_regs", "warpSize"} <= set(props)
    assert props["multiprocessor_count"] == os.cpu_count()
    assert drv.get_current_stream() == 0
    with use_target("kunlun:xpu3"):
        t = drv.get_current_target()
        assert (t.backend, t.arch) == ("kunlun", "xpu3")
        props = drv.utils.get_device_properties(0)
        assert props["multiprocessor_count"] == compiler.current_target().arch.cores
        assert props["max_shared_mem"] == compiler.current_target().caps.local_memory_bytes
    pytest.importorskip("triton")
    with use_target("gpu:sm_90"):
        t = drv.get_current_target()
        assert (t.backend, t.arch, t.warp_size) == ("cuda", 90, 32)


def test_testing_helpers_do_nothing_until_run():
    calls = []

    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["n"], x_vals=[4, 8], line_arg="provider", line_vals=["a"], line_names=["A"], plot_name="p",
        args={}))
    def bench(n, provider):
        calls.append(n)
        return float(n)

    assert calls == []
    bench.run(print_data=False)
    assert calls == [4, 8]
    ms = triton.testing.do_bench(lambda: torch.ones(16).sum(), warmup=1, rep=2)
    assert ms > 0
    lo, hi = triton.testing.do_bench(lambda: None, warmup=1, rep=2, quantiles=[0.2, 0.8])
    assert 0 <= lo <= hi


def test_tensor_descriptor_host_side():
    from compiler.triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415
    t = torch.zeros(8, 16)
    d = TensorDescriptor.from_tensor(t, [4, 8])
    assert (d.base is t, d.shape, d.strides, d.block_shape) == (True, [8, 16], [16, 1], [4, 8])
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        TensorDescriptor.from_tensor(t.t(), [4, 4])


@pytest.mark.compile
def test_kernel_of_a_real_triton_jit_function():
    real = pytest.importorskip("triton")
    import triton.language as rtl  # noqa: PLC0415

    @real.jit
    def real_helper(v):
        return v * 3.0

    @real.jit
    def real_kernel(x, y, n, BLOCK: rtl.constexpr):
        offs = rtl.program_id(0) * BLOCK + rtl.arange(0, BLOCK)
        m = offs < n
        rtl.store(y + offs, real_helper(rtl.load(x + offs, mask=m)), mask=m)

    assert type(real_kernel).__module__.startswith("triton")
    k = kernel(real_kernel)
    assert k.fn is real_kernel.fn
    x, y = torch.randn(50), torch.zeros(50)
    k[(2,)](x, y, 50, BLOCK=32, num_warps=4)
    torch.testing.assert_close(y, x * 3)


_ALIASED = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    import torch
    import triton
    import triton.language as tl
    from triton.language.extra.libdevice import rsqrt
    from triton.runtime import driver
    try:
        from triton.no_such_module import x
    except ModuleNotFoundError as e:
        missing = e.name

    @triton.jit
    def k(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, rsqrt(tl.load(x + offs, mask=m, other=1.0)), mask=m)

    from compiler import use_target
    x = torch.rand(40) + 0.5
    for target in ("cpu", "gpu:interpret"):
        y = torch.zeros(40)
        with use_target(target):
            k[(triton.cdiv(40, 16),)](x, y, 40, BLOCK=16, num_warps=4)
        assert torch.allclose(y, x.rsqrt(), rtol=1e-5, atol=1e-6), target
    import importlib
    real = importlib.import_module("triton")   # not through the alias: the real one (the gpu target's)
    print(triton.__name__, type(k).__module__, missing, real.__name__, real is not triton,
          driver.active.get_current_target().backend)
""")


@pytest.mark.integration
@pytest.mark.parametrize("how", ["runner", "env", "function"])
def test_alias_serves_the_front_door_as_triton(tmp_path, how):
    pytest.importorskip("triton")
    script = tmp_path / "uses_triton.py"
    src = _ALIASED.format(repo=str(REPO))
    if how == "function":
        src = "import sys\nsys.path.insert(0, %r)\nimport compiler.triton\ncompiler.triton.install_alias()\n" \
              % str(REPO) + src
    elif how == "env":
        src = "import sys\nsys.path.insert(0, %r)\nimport compiler\n" % str(REPO) + src
    script.write_text(src)
    env = {k: v for k, v in os.environ.items() if k != "TILEJIT_AS_TRITON"}
    cmd = [sys.executable, str(script)]
    if how == "runner":
        cmd = [sys.executable, "-m", "compiler.as_triton", str(script)]
    elif how == "env":
        env["TILEJIT_AS_TRITON"] = "1"
    out = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compiler.triton", "compiler.triton.jit", "triton.no_such_module", "triton",
                                  "True", "cpu"]


def test_alias_in_process_is_undone_by_uninstall(tmp_path):
    real = pytest.importorskip("triton")
    assert not triton.alias_installed()
    with triton.alias():
        import triton as served  # noqa: PLC0415
        from triton.language.extra import libdevice  # noqa: PLC0415
        assert served is triton and libdevice.rsqrt is ours.rsqrt
    import triton as after  # noqa: PLC0415
    assert after is real and not triton.alias_installed()


@pytest.mark.integration
def test_as_triton_usage_errors():
    out = subprocess.run([sys.executable, "-m", "compiler.as_triton"], cwd=str(REPO), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "usage" in out.stderr
    out = subprocess.run([sys.executable, "-m", "compiler.as_triton", "missing_script.py"], cwd=str(REPO),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no such script" in out.stderr


@pytest.mark.parametrize("target", on_targets("cpu", "kunlun:xpu3"))
def test_tensor_type_attribute_and_loop_carried_pointer_tiles(target):
    @triton.jit
    def colsum(x, out, n_rows, n_cols: tl.constexpr, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        ptrs = x + cols                      # a tile of pointers carried through the loop
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(0, n_rows):
            acc += tl.load(ptrs, mask=cols < n_cols, other=0.0).to(tl.float32)
            ptrs += n_cols
        tl.static_assert(ptrs.type.element_ty == x.type, "a pointer tile's element type")
        tl.store(out + cols, acc.to(out.type.element_ty), mask=cols < n_cols)

    x = torch.randn(5, 12).half()
    out = torch.empty(12, dtype=torch.float16)
    with use_target(target):
        colsum[(1,)](x, out, 5, 12, BLOCK=16)
    torch.testing.assert_close(out, x.float().sum(0).half(), rtol=1e-3, atol=1e-3)
