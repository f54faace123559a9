"""The gpu target (targets/gpu): Tile IR -> Triton source, compile-only builds for sm_80/sm_90/
gfx942 through triton.compile, the device target's cache keys and binary loading (everything up to
the launch itself), and numerics through Triton's interpreter on CPU tensors.
No GPU is needed; the device check is benchmarks/gpu_check.py."""
import ast
import os

import pytest
import torch

triton = pytest.importorskip("triton")

import compiler  # noqa: E402
import kernels  # noqa: E402
import targets.gpu  # noqa: E402
from compiler import jit as J  # noqa: E402
from compiler.cache import STATS, cache_key  # noqa: E402
from compiler.errors import CompilationError, KernelArgumentError, TargetError  # noqa: E402
from compiler.inspect import main as inspect_main  # noqa: E402
from compiler.ir.ops import OPS  # noqa: E402
from examples import example_kernels as ex  # noqa: E402
from kernels import norm, sampling, serving_attention as sa  # noqa: E402
from targets.gpu import renderer as R  # noqa: E402

pytestmark = pytest.mark.compile

compiler.register_target("gpu", targets.gpu.TARGET)   # idempotent; also built in once registered


def _run(target, policy, f, *args, **kw):
    with compiler.use_target(target), compiler.numerics(policy):
        return f(*args, **kw)


def _first(x):
    return x[0] if isinstance(x, tuple) else x


# ---------------------------------------------------------------------------------------------
# op coverage and rendering
# ---------------------------------------------------------------------------------------------
@pytest.mark.no_toolchain
def test_every_ir_op_is_rendered_or_rejected():
    missing = set(OPS) - R.COVERED - set(R.REJECTED)
    assert not missing, f"ops with neither a Triton rendering nor a rejection: {sorted(missing)}"
    for name in R.COVERED:
        assert name in OPS, f"renderer covers unknown op {name}"


def _source(kfn, sig, consts, target="gpu:sm_90", policy="fast"):
    from compiler.inspect import parse_type, specs_for  # noqa: PLC0415
    specs = specs_for(kfn, [parse_type(t) for t in sig.split(",")], dict(consts))
    _, _, src = kfn.lower(specs, compiler.get_target(target), policy)
    return src


SOFTMAX = (ex.softmax_kernel, "*fp32,*fp32,i32,i32,i32", {"BLOCK": 128})
MATMUL = (ex.matmul_kernel, "*fp16,*fp16,*fp16,i32,i32,i32,i32,i32,i32,i32,i32,i32",
          {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})


@pytest.mark.no_toolchain
@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_rendered_source_is_one_readable_jit_function(policy):
    src = _source(*SOFTMAX, policy=policy)
    tree = ast.parse(src)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(fns) == 1 and fns[0].name == "softmax_kernel"
    assert "@triton.jit" in src and "x_ptr, out_ptr, n_cols, x_stride, out_stride" in src
    assert src == _source(*SOFTMAX, policy=policy)           # deterministic
    assert "v9 = tl.load(" in src                            # vN mirrors %N of the printed IR
    if policy == "strict":
        assert "tl.div_rn(" in src and "tl.exp(" not in src and "tl.split(tl.permute(tl.reshape(" in src
    else:
        assert "tl.exp(" in src and "tl.max(" in src and "tl.sum(" in src


@pytest.mark.no_toolchain
def test_dot_rendering_per_policy():
    fast = _source(*MATMUL, policy="fast")
    assert "tl.dot(" in fast and "tl.fma(" not in fast
    f32 = _source(ex.matmul_kernel, MATMUL[1].replace("fp16", "fp32"), MATMUL[2])
    assert 'input_precision="ieee"' in f32
    assert 'input_precision="tf32"' in _source(ex.matmul_kernel, MATMUL[1].replace("fp16", "fp32"), MATMUL[2],
                                               target="gpu:sm_90+tf32")
    strict = _source(*MATMUL, policy="strict")
    assert "tl.dot(" not in strict and "tl.fma(" in strict and "-0.0), axis=1)" in strict
    assert 'fp_downcast_rounding="rtne"' in strict   # fp32 accumulator -> fp16 output rounds to nearest even


@compiler.kernel
def _dot_f16_acc(a_ptr, b_ptr, c_ptr, N: compiler.language.constexpr):
    tl = compiler.language
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i[:, None] * N + i[None, :])
    b = tl.load(b_ptr + i[:, None] * N + i[None, :])
    tl.store(c_ptr + i[:, None] * N + i[None, :], tl.dot(a, b, out_dtype=tl.float16))


def test_fp16_accumulator_in_the_fast_policy_only():
    a, b = torch.randn(16, 16).half(), torch.randn(16, 16).half()
    c = torch.empty(16, 16, dtype=torch.float16)
    _run("gpu:interpret", "fast", _dot_f16_acc[(1,)], a, b, c, N=16)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=2e-2)
    assert "out_dtype=tl.float16" in _source(_dot_f16_acc, "*fp16,*fp16,*fp16", {"N": 16})
    with pytest.raises(CompilationError, match="only in the fast policy, on fp16 operands"):
        _run("gpu:interpret", "strict", _dot_f16_acc[(1,)], a, b, c, N=16)


@pytest.mark.no_toolchain
def test_non_power_of_two_tiles_are_rejected_clearly():
    x = torch.empty(16)
    with pytest.raises(CompilationError) as e:
        ex.add_kernel.warmup(x, x, x, 1000, BLOCK=100, target="gpu:sm_90")
    msg = str(e.value)
    # the kernel, the argument responsible and the fix
    assert "in kernel 'add_kernel'" in msg and "power-of-two" in msg
    assert "from argument BLOCK=100" in msg and "Use BLOCK=128, with masked loads and stores" in msg


@pytest.mark.no_toolchain
def test_target_variants():
    assert compiler.get_target("gpu:sm_90").arch == "sm_90"
    assert compiler.get_target("gpu:gfx942").backend == "hip"
    assert compiler.get_target("gpu:interpret").device_type == "cpu"
    with pytest.raises(TargetError, match="no variant"):
        compiler.get_target("gpu:sm90x")
    if not torch.cuda.is_available():
        with pytest.raises(TargetError, match="gpu:interpret"):
            compiler.get_target("gpu")
    fp = compiler.get_target("gpu:sm_80").fingerprint()
    assert fp["arch"] == "sm_80" and fp["triton"] == triton.__version__ and fp["options"]["num_warps"] == 4
    # Triton builds sm_90a code for capability 9.0 either way: one arch, one fingerprint
    assert compiler.get_target("gpu:sm_90a").fingerprint() == compiler.get_target("gpu:sm_90").fingerprint()


@pytest.mark.no_toolchain
def test_inspect_prints_triton_source(capsys):
    rc = inspect_main(["kernels.norm:rms_norm_kernel", "-s", "*fp32,*fp32,*fp32,i32,i32,i32,fp32", "-c", "r_ptr=None",
                       "-c", "res_ptr=None", "-c", "stride_r=0", "-c", "stride_rn=0", "-c", "stride_xn=1",
                       "-c", "HAS_R=False", "-c", "HAS_W=True", "-c", "BLOCK=256", "--target", "gpu:sm_90",
                       "--stage", "source", "--numerics", "strict"])
    out = capsys.readouterr().out
    assert rc == 0 and "// ===== gpu:sm_90 source =====" in out
    assert "def rms_norm_kernel(x_ptr, w_ptr, y_ptr, N, stride_x, stride_y, eps):" in out
    assert "tl.sqrt_rn(" in out and "pairwise tree" in out


# ---------------------------------------------------------------------------------------------
# compile-only builds (triton.compile without a device)
# ---------------------------------------------------------------------------------------------
def _warm_all(target, policy):
    x = torch.empty(16)
    h = torch.empty(16, dtype=torch.float16)
    return {
        "add": ex.add_kernel.warmup(x, x, x, 1000, BLOCK=256, target=target, numerics=policy),
        "softmax": ex.softmax_kernel.warmup(x, x, 100, 128, 128, BLOCK=128, target=target, numerics=policy),
        "matmul": ex.matmul_kernel.warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                          BLOCK_K=32, target=target, numerics=policy),
        "rms_norm": norm.rms_norm_kernel.warmup(x, None, x, x, None, 1000, 1000, 1, 0, 0, 1000, 1e-6, HAS_R=False,
                                                HAS_W=True, BLOCK=256, target=target, numerics=policy),
    }


def _entry(ck):
    return J.kernel_cache().lookup(ck.key)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_compile_to_ptx_and_cubin(arch):
    for policy in ("fast", "strict") if arch == "sm_90" else ("fast",):
        cks = _warm_all(f"gpu:{arch}", policy)
        for name, ck in cks.items():
            e = _entry(ck)
            ptx = e.file("kernel.ptx").read_text()
            assert f".target {arch}" in ptx, name
            assert f".entry {ck.name}" in ptx or f".entry {ck.name}(" in ptx or ck.name in ptx
            assert e.file("kernel.cubin").stat().st_size > 0
            assert e.meta["arch"] == arch and e.meta["policy"] == policy
            md = e.file("metadata.json").read_text()
            assert '"enable_fp_fusion": ' + ("false" if policy == "strict" else "true") in md


def test_compile_to_amdgpu():
    try:
        cks = {"add": ex.add_kernel.warmup(torch.empty(4), torch.empty(4), torch.empty(4), 1000, BLOCK=256,
                                          target="gpu:gfx942")}
    except TargetError as e:   # pragma: no cover - depends on the Triton wheel's AMD toolchain
        pytest.skip(f"Triton's AMD backend cannot compile here: {e}")
    h = torch.empty(4, dtype=torch.float16)
    cks["matmul"] = ex.matmul_kernel.warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                            BLOCK_K=32, target="gpu:gfx942")
    cks["softmax_strict"] = ex.softmax_kernel.warmup(torch.empty(4), torch.empty(4), 100, 128, 128, BLOCK=128,
                                                     target="gpu:gfx942", numerics="strict")
    for ck in cks.values():
        e = _entry(ck)
        assert "gfx942" in e.file("kernel.amdgcn").read_text()
        assert e.file("kernel.hsaco").stat().st_size > 0


def _every_kernel():
    """Every demo kernel (examples/example_kernels.py) and every library kernel, as calls on host tensors."""
    x, w = torch.randn(4, 300), torch.randn(300)
    h = torch.randn(40, 64).half()
    q, kv = torch.randn(1, 4, 20, 128), torch.randn(1, 2, 24, 128)
    kc, bt = torch.randn(20, 16, 2, 128), torch.arange(20).reshape(1, 20)
    return {
        "add": lambda: ex.add(x, x), "softmax": lambda: ex.softmax(x), "layernorm": lambda: ex.layernorm(x, w, w),
        "matmul": lambda: ex.matmul(h, h.t().contiguous()), "row_sum_max": lambda: ex.row_sum_max(x),
        "gelu": lambda: ex.gelu(x), "silu": lambda: ex.silu(x.bfloat16()),
        "embedding": lambda: ex.embedding(torch.tensor([3, 1], dtype=torch.int32), x),
        "transpose": lambda: ex.transpose(x),
        "lib.matmul": lambda: kernels.matmul(h, h.t(), bias=torch.randn(40).half(), activation="gelu"),
        "lib.layer_norm": lambda: kernels.layer_norm(x, w, w), "lib.rms_norm": lambda: kernels.rms_norm(x, w),
        "lib.add_rms_norm": lambda: kernels.add_rms_norm(x, x, w),
        "lib.attention": lambda: kernels.attention(q, kv, kv, causal=True, return_lse=True),
        # serving attention: an extend (one program walks its splits) and a decode (parallel splits + combine)
        "lib.paged_attention": lambda: sa.paged_attention(q[0].transpose(0, 1).contiguous(), kc, kc, bt,
                                                          torch.tensor([300]), torch.tensor([0, 20])),
        "lib.paged_decode": lambda: sa.paged_decode_attention(q[0, :, :1].transpose(0, 1).contiguous(), kc, kc, bt,
                                                              torch.tensor([300])),
        "lib.sample": lambda: sampling.sample(x, 0.8, 10, 0.9, seed=3),
        "lib.matmul_gated_mixed": lambda: kernels.matmul(h, torch.randn(64, 96), activation="silu_and_mul"),
    }


# every kernel for each arch: sm_90 in both policies (the strict policy for the library kernels)
COMPILE_CASES = [(arch, policy, name) for arch, policies in (("sm_90", ("fast", "strict")), ("sm_80", ("fast",)),
                                                            ("gfx942", ("fast",)))
                 for policy in policies for name in sorted(_every_kernel()) if policy == "fast" or name.startswith("lib.")]


@pytest.mark.sampled
@pytest.mark.parametrize("arch,policy,name", COMPILE_CASES)
def test_every_demo_and_library_kernel_compiles_without_a_gpu(arch, policy, name):
    """compile_only: each call compiles the kernels it launches for the arch, nothing runs; every
    entry holds the arch's binary."""
    binary, marker = ("kernel.cubin", f".target {arch}") if arch.startswith("sm") else ("kernel.hsaco", "gfx942")
    asm = "kernel.ptx" if arch.startswith("sm") else "kernel.amdgcn"
    with compiler.use_target(f"gpu:{arch}"), compiler.numerics(policy), compiler.compile_only() as built:
        try:
            _every_kernel()[name]()
        except TargetError as e:   # pragma: no cover - depends on the Triton wheel's AMD toolchain
            if arch == "gfx942":
                pytest.skip(f"Triton's AMD backend cannot compile here: {e}")
            raise
    assert built, name
    for ck in built:
        e = _entry(ck)
        assert marker in e.file(asm).read_text(), (name, ck.name)
        assert e.file(binary).stat().st_size > 0 and e.meta["policy"] == policy


def test_cache_hit_skips_triton(monkeypatch):
    x = torch.empty(16)
    ex.add_kernel.warmup(x, x, x, 1000, BLOCK=512, target="gpu:sm_90")   # built (or already on disk)
    calls = []
    real = triton.compile
    monkeypatch.setattr(triton, "compile", lambda *a, **k: calls.append(1) or real(*a, **k))
    ex.add_kernel.compiled.clear()                # forget the in-process launcher: go to the tilejit cache
    J.kernel_cache().forget()                     # and to its disk entry
    before = STATS.as_dict()
    ck = ex.add_kernel.warmup(x, x, x, 1000, BLOCK=512, target="gpu:sm_90")
    after = STATS.as_dict()
    assert after["builds"] == before["builds"] and after["disk_hits"] == before["disk_hits"] + 1
    assert calls == []
    with pytest.raises(TargetError, match="compile-only"):
        ck.launcher((1,), (x, x, x, 1000, 512))


# ---------------------------------------------------------------------------------------------
# the device target: cache keys and binary loading, everything short of a launch
# ---------------------------------------------------------------------------------------------
def _device_target(monkeypatch, backend="cuda", arch="sm_90"):
    """The real `gpu` target as the plugin creates it on a device of this arch (only the query of
    torch's device is replaced). Not registered: get_target("gpu") is unaffected."""
    monkeypatch.setattr(targets.gpu, "_device_arch", lambda: (backend, arch))
    return targets.gpu.TARGET.create(None)


@pytest.fixture
def triton_compiles(monkeypatch):
    """Counts every call of triton.compile, under each name it is reachable by."""
    import triton.compiler  # noqa: PLC0415
    import triton.compiler.compiler as cc  # noqa: PLC0415
    calls = []
    real = cc.compile

    def counting(*a, **k):
        calls.append(a[0])
        return real(*a, **k)
    for mod in (triton, triton.compiler, cc):
        monkeypatch.setattr(mod, "compile", counting)
    return calls


def _add_args(n=1024, x=None):
    x = torch.zeros(64) if x is None else x
    return (x, torch.zeros(64), torch.zeros(64), n, 256)     # add_kernel(x, y, out, n, BLOCK)


def _device_key_and_ir(dev, policy, args):
    """What KernelFunction._compile computes for `dev`: the real arg specs, lowering and key."""
    kf = ex.add_kernel
    specs, runtime = kf._argspecs(args, compiler.get_target("gpu:sm_90"))   # CPU tensors: dtypes only
    _, ir, _ = kf.lower(specs, dev, policy)
    return cache_key(ir, dev, policy), ir, runtime


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_device_target_hits_entry_built_without_gpu(monkeypatch, triton_compiles, policy):
    args = _add_args()
    built = ex.add_kernel.warmup(*args, target="gpu:sm_90", numerics=policy)   # a pre-built cache
    dev = _device_target(monkeypatch)
    assert (dev.mode, dev.name, dev.arch) == ("device", "gpu", "sm_90")
    assert dev.fingerprint() == compiler.get_target("gpu:sm_90").fingerprint()
    key, ir, runtime = _device_key_and_ir(dev, policy, args)
    assert key == built.key
    # another arch or policy is another entry
    assert _device_key_and_ir(_device_target(monkeypatch, arch="sm_80"), policy, args)[0] != key
    J.kernel_cache().forget()                              # read it from disk, as a fresh process would
    triton_compiles.clear()
    before = STATS.as_dict()
    entry = J.kernel_cache().lookup(key)
    launcher = dev.load(ir, entry, runtime, J.kernel_cache())
    assert triton_compiles == [] and STATS.as_dict()["builds"] == before["builds"]
    from triton.compiler.compiler import CompiledKernel  # noqa: PLC0415
    ck = launcher.binary.compiled
    assert isinstance(ck, CompiledKernel) and ck.name == "add_kernel"
    assert ck.kernel == entry.file("kernel.cubin").read_bytes()          # the stored binary is what runs
    assert (ck.metadata.target.backend, ck.metadata.target.arch) == ("cuda", 90)
    assert ck.metadata.enable_fp_fusion is (policy == "fast") and ck.metadata.num_warps == 4
    assert ".target sm_90" in ck.asm["ptx"]
    assert list(ck.src.signature.items()) == [("x_ptr", "*fp32"), ("y_ptr", "*fp32"), ("out_ptr", "*fp32"),
                                              ("n", "i32")]                       # launch order
    assert launcher.arg_indices == [0, 1, 2, 3]
    assert launcher.select([args[i] for i in runtime]) is launcher.binary   # aligned: the entry's binary


def test_rocm_device_target_hits_entry_built_without_gpu(monkeypatch, triton_compiles):
    args = _add_args()
    try:
        built = ex.add_kernel.warmup(*args, target="gpu:gfx942")
    except TargetError as e:   # pragma: no cover - depends on the Triton wheel's AMD toolchain
        pytest.skip(f"Triton's AMD backend cannot compile here: {e}")
    dev = _device_target(monkeypatch, "hip", "gfx942")
    key, ir, runtime = _device_key_and_ir(dev, "fast", args)
    assert key == built.key
    triton_compiles.clear()
    entry = J.kernel_cache().lookup(key)
    ck = dev.load(ir, entry, runtime, J.kernel_cache()).binary.compiled
    assert triton_compiles == []
    assert ck.kernel == entry.file("kernel.hsaco").read_bytes()
    assert (ck.metadata.target.backend, ck.metadata.target.arch, ck.metadata.warp_size) == ("hip", "gfx942", 64)


def _divisibility(ttir: str) -> list[bool]:
    """Per kernel argument of the TTIR: does it carry tt.divisibility = 16?"""
    import re  # noqa: PLC0415
    head = ttir[ttir.index("tt.func"):ttir.index(" attributes")]
    return [bool(d) for _, d in re.findall(r"%(\w+): [^ ]+( \{tt\.divisibility = 16 : i32\})? loc", head)]


def test_device_launcher_checks_alignment_and_integer_specialisation(monkeypatch, triton_compiles):
    args = _add_args()
    ex.add_kernel.warmup(*args, target="gpu:sm_90")
    dev = _device_target(monkeypatch)
    key, ir, runtime = _device_key_and_ir(dev, "fast", args)
    launcher = dev.load(ir, J.kernel_cache().lookup(key), runtime, J.kernel_cache())
    assert _divisibility(launcher.binary.compiled.asm["ttir"]) == [True, True, True, True]
    view = torch.zeros(65)[1:]                               # 4 bytes past an aligned start
    assert view.data_ptr() % 16 == 4
    rt = [view, args[1], args[2], 1024]
    # strict cache mode: the unaligned variant may not be compiled -> a clear refusal
    monkeypatch.setenv("TILEJIT_CACHE_STRICT", "1")
    with pytest.raises(TargetError) as e:
        launcher.select(rt)
    msg = str(e.value)
    assert "kernel 'add_kernel'" in msg and "'x_ptr'" in msg and "not 16-byte aligned" in msg and ".clone()" in msg
    monkeypatch.delenv("TILEJIT_CACHE_STRICT")
    # otherwise: the variant without that assumption, built once through the tilejit cache
    triton_compiles.clear()
    variant = launcher.select(rt)
    assert variant is not launcher.binary and variant.assume.unaligned == ("x_ptr",)
    assert _divisibility(variant.compiled.asm["ttir"]) == [False, True, True, True]
    assert launcher.select(rt) is variant and launcher.select([view, args[1], view, 1024]) is not variant
    assert len(triton_compiles) == 2
    # integers: the binary assumes n % 16 == 0 (n=1024 at compile time) and int32
    with pytest.raises(KernelArgumentError, match=r"'add_kernel': argument 'n' is 1001, .*divisible by 16"):
        launcher.select([args[0], args[1], args[2], 1001])
    with pytest.raises(KernelArgumentError, match=r"argument 'n' is 8589934592, outside the int32 range"):
        launcher.select([args[0], args[1], args[2], 2 ** 33])


def test_device_launcher_without_integer_hint_accepts_any_int(monkeypatch):
    args = _add_args(n=1000)
    ex.add_kernel.warmup(*args, target="gpu:sm_90")
    dev = _device_target(monkeypatch)
    key, ir, runtime = _device_key_and_ir(dev, "fast", args)
    launcher = dev.load(ir, J.kernel_cache().lookup(key), runtime, J.kernel_cache())
    assert _divisibility(launcher.binary.compiled.asm["ttir"]) == [True, True, True, False]
    assert launcher.select([args[0], args[1], args[2], 1001]) is launcher.binary


# ---------------------------------------------------------------------------------------------
# numerics through Triton's interpreter vs the cpu target
# ---------------------------------------------------------------------------------------------
def _both(policy, f, *args, **kw):
    g = _first(_run("gpu:interpret", policy, f, *args, **kw))
    c = _first(_run("cpu", policy, f, *args, **kw))
    return g, c


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_interpreter_vector_add(policy):
    x, y = torch.randn(3000), torch.randn(3000)
    g, c = _both(policy, ex.add, x, y)
    assert torch.equal(g, c)


def test_interpreter_softmax():
    x = torch.randn(8, 100) * 3
    g, c = _both("strict", ex.softmax, x)
    assert torch.equal(g, c)
    g, c = _both("fast", ex.softmax, x)
    torch.testing.assert_close(g, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interpreter_matmul_dot(dtype):
    a, b = torch.randn(40, 50).to(dtype), torch.randn(50, 24).to(dtype)
    bias = torch.randn(24).to(dtype)
    g, c = _both("strict", kernels.matmul, a, b, bias=bias, activation="gelu")
    assert torch.equal(g, c)
    g, c = _both("fast", kernels.matmul, a, b, bias=bias, activation="gelu")
    torch.testing.assert_close(g, c, rtol=1e-4 if dtype == torch.float32 else 1.6e-2, atol=1e-4)


def test_interpreter_norms_and_attention_strict_bitwise():
    x = torch.randn(4, 100)
    w, bvec = torch.randn(100), torch.randn(100)
    for g, c in (_both("strict", kernels.rms_norm, x, w), _both("strict", kernels.layer_norm, x, w, bvec),
                 _both("strict", kernels.rms_norm, x.bfloat16(), w.bfloat16()),
                 _both("strict", kernels.add_rms_norm, x.half(), x.half() * 0.5, w.half())):
        assert torch.equal(g, c)
    for g, c in (_both("fast", kernels.rms_norm, x, w), _both("fast", kernels.layer_norm, x, w, bvec),
                 _both("fast", kernels.add_rms_norm, x, x * 0.5, w)):
        torch.testing.assert_close(g, c, rtol=1e-5, atol=1e-5)
    q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 24, 16), torch.randn(1, 2, 24, 16)
    g, c = _both("strict", kernels.attention, q, k, v, causal=True)
    assert torch.equal(g, c)
    g, c = _both("fast", kernels.attention, q, k, v, causal=True)
    torch.testing.assert_close(g, c, rtol=1e-5, atol=1e-5)


def test_strict_defaults_agree_across_targets_where_fast_defaults_differ():
    """Rows of 3000 (cpu's fast BLOCK 1024, gpu's 4096) and head_dim 80 (cpu's fast BLOCK_N 32, gpu's
    64): strict takes the shared STRICT_BLOCK / STRICT_BLOCK_N, so the default calls agree bitwise."""
    assert kernels.config_for("layer_norm", "cpu", N=3000) != kernels.config_for("layer_norm", "gpu:sm_90", N=3000)
    assert (kernels.config_for("attention", "cpu", head_dim=80, seq_k=100)["BLOCK_N"]
            != kernels.config_for("attention", "gpu:sm_90", head_dim=80, seq_k=100)["BLOCK_N"])
    x, w, bvec = torch.randn(2, 3000), torch.randn(3000), torch.randn(3000)
    g, c = _both("strict", kernels.layer_norm, x, w, bvec)
    assert torch.equal(g, c)
    q, k, v = torch.randn(1, 1, 8, 80), torch.randn(1, 1, 100, 80), torch.randn(1, 1, 100, 80)
    g, c = _both("strict", kernels.attention, q, k, v)
    assert torch.equal(g, c)


def test_interpreter_path_needs_no_global_env():
    assert not os.environ.get("TRITON_INTERPRET")
    assert not triton.knobs.runtime.interpret
    from triton.runtime.jit import JITFunction  # noqa: PLC0415
    call = JITFunction.__dict__["__call__"]
    _run("gpu:interpret", "fast", ex.add, torch.randn(10), torch.randn(10))
    assert JITFunction.__dict__["__call__"] is call        # the routing is undone after the launch


@compiler.kernel
def _scalar_and_tile_mask(o_ptr, n, m, BLOCK: compiler.language.constexpr):
    tl = compiler.language
    offs = tl.arange(0, BLOCK)
    for i in range(tl.minimum(8, m)):
        tl.store(o_ptr + i * BLOCK + offs, offs.to(tl.float32), mask=(i < tl.minimum(8, m)) & (offs < n))


def test_a_scalar_comparison_and_a_tile_mask_run_in_the_interpreter():
    """Triton's interpreter holds a scalar comparison's int1 as an integer; and-ed with a tile mask it
    reaches tl.store as an integer mask it refuses (the vendor's causal_conv1d does this): the
    interpret rendering compares the combined mask with 0. Compiled sources keep the plain `&`."""
    o = torch.zeros(8 * 16)
    with compiler.use_target("gpu:interpret"):
        _scalar_and_tile_mask[(1,)](o, 10, 5, BLOCK=16)
    want = torch.zeros(8, 16)
    want[:5, :10] = torch.arange(10.0)
    assert torch.equal(o.view(8, 16), want)
    with compiler.use_target("gpu:sm_90"), compiler.render_only() as seen:
        _scalar_and_tile_mask[(1,)](o, 10, 5, BLOCK=16)
    assert "!= 0)" not in seen[0].source
