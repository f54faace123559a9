"""The library ops as torch operators (kernels/torch_ops.py): torch.library.opcheck for every
registered operator, torch.compile(fullgraph=True) and torch.export over a block that uses every
op (results equal to eager, bit for bit), the tilejit context read when a compiled graph runs,
and FakeTensorMode / meta tensors (shapes only, never a launch; a clean error where a kernel
would get a tensor without storage)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kernels
from compiler import numerics, use_target
from kernels import torch_ops
from kernels.integrations._ops import act_and_mul, rope

pytestmark = pytest.mark.compile

F32 = torch.float32


def randn(*shape, seed=0, scale=1.0, dtype=F32, grad=False):
    t = (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)
    return t.requires_grad_(grad)


# =============================================================================================
# opcheck: one sample per registered operator (functional and _out forms)
# =============================================================================================
def _attn_inputs(grad):
    return randn(1, 4, 5, 16, seed=1, grad=grad), randn(1, 2, 7, 16, seed=2, grad=grad), \
        randn(1, 2, 7, 16, seed=3, grad=grad)


def _samples(grad: bool) -> dict:
    """name -> positional args of tilejit::<name> (tensors require grad when the op has a backward)."""
    x, w, b = randn(3, 5, 40, seed=4, grad=grad), randn(40, seed=5, grad=grad), randn(40, seed=6, grad=grad)
    q, k, v = _attn_inputs(grad)
    mask = torch.rand(1, 1, 5, 7, generator=torch.Generator().manual_seed(7)) > 0.3
    out, lse = kernels.attention(*(t.detach() for t in (q, k, v)), causal=True, return_lse=True)
    cos, sin = randn(1, 1, 5, 16, seed=8), randn(1, 1, 5, 16, seed=9)
    g, u = randn(6, 24, seed=10, grad=grad), randn(6, 24, seed=11, grad=grad)
    xd = x.detach()
    return {
        "matmul": (randn(2, 9, 40, seed=12, grad=grad), randn(40, 24, seed=13, grad=grad),
                   randn(24, seed=14, grad=grad), "silu", None, None),
        "rms_norm": (x, w, 1e-6, None),
        "add_rms_norm": (x, randn(3, 5, 40, seed=15, grad=grad), w, 1e-6, None),
        "layer_norm": (x, w, b, 1e-5, None),
        "attention": (q, k, v, mask, False, 0.25, True, None),
        "hf_rope": (randn(1, 4, 5, 16, seed=16, grad=grad), cos, sin, False),
        "hf_act_and_mul": (g, u, "silu"),
        "act_and_mul": (randn(3, 2, 48, seed=26), "gelu_erf", None),
        "add_layer_norm": (xd, randn(3, 5, 40, seed=27), w.detach(), b.detach(), 1e-5, None),
        # the backward operators (no gradient of their own)
        "matmul_backward": (randn(9, 40, seed=17), randn(40, 24, seed=18), randn(24, seed=19), randn(9, 24, seed=20),
                            "gelu", True, True, True, None),
        "rms_norm_backward": (xd, w.detach(), randn(3, 5, 40, seed=21), randn(3, 5, 40, seed=22), 1e-6, True, None),
        "layer_norm_backward": (xd, w.detach(), randn(3, 5, 40, seed=23), 1e-5, True, True, None),
        "attention_backward": (*(t.detach() for t in (q, k, v)), None, True, 0.25, out, lse, randn(1, 4, 5, 16, seed=24),
                               None, None),
        "hf_act_and_mul_backward": (g.detach(), u.detach(), randn(6, 24, seed=25), "gelu"),
    }


def test_every_registered_operator_has_a_sample():
    # (test_autograd.py registers a toy "test_*" operator of its own)
    assert sorted(_samples(False)) == LIBRARY_OPS
    with_backward = {n for n, op in torch_ops.registered().items() if op.has_backward}
    assert with_backward == {"matmul", "rms_norm", "add_rms_norm", "layer_norm", "attention", "hf_rope",
                             "hf_act_and_mul"}


# the library's operators (test_autograd.py registers toy "test_*" ones); _samples has one sample each
LIBRARY_OPS = sorted(n for n in torch_ops.registered() if not n.startswith("test_"))


@pytest.mark.parametrize("name", LIBRARY_OPS)
def test_opcheck(name):
    lop = torch_ops.library_op(name)
    args = _samples(lop.has_backward)[name]
    torch.library.opcheck(lop.op, args)                       # with requires_grad inputs: the backward too
    outs = tuple(o.detach().clone() for o in _as_tuple(lop.op(*args)))
    bufs = tuple(torch.full_like(o, float("nan")) for o in outs)
    plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(lop.out_op, plain + bufs)           # the out= form: mutation declared
    lop.out_op(*plain, *bufs)
    for o, r in zip(bufs, outs):
        assert torch.equal(o, r)                              # both forms launch the same kernels


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


# =============================================================================================
# torch.compile(fullgraph=True) and torch.export over a block using every op
# =============================================================================================
class Block(torch.nn.Module):
    """rms_norm, add_rms_norm, layer_norm, matmul (bias, activation, out=), rope, attention (causal,
    mask, lse), act_and_mul."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.h, self.hd = heads, d // heads
        p = torch.nn.Parameter
        self.w1, self.w2, self.w3, self.b3 = p(randn(d, seed=30)), p(randn(d, seed=31)), p(randn(d, seed=32)), \
            p(randn(d, seed=33))
        self.wqkv, self.bqkv = p(randn(d, 3 * d, seed=34, scale=d ** -0.5)), p(randn(3 * d, seed=35))
        self.wup = p(randn(d, 4 * d, seed=36, scale=d ** -0.5))
        self.wdown = p(randn(2 * d, d, seed=37, scale=(2 * d) ** -0.5))

    def forward(self, x, residual, cos, sin, mask):
        T, d = x.shape
        h = kernels.rms_norm(x, self.w1)
        h, res = kernels.add_rms_norm(h, residual, self.w2)
        h = kernels.layer_norm(h, self.w3, self.b3)
        qkv = kernels.matmul(h, self.wqkv, self.bqkv).view(T, 3, self.h, self.hd).permute(1, 2, 0, 3)
        q, k, v = rope(qkv[0][None], cos, sin), rope(qkv[1][None], cos, sin), qkv[2][None]
        a = kernels.attention(q, k, v, causal=True)
        a2, lse = kernels.attention(q, k, v, mask=mask, return_lse=True)
        t = (a + a2).transpose(1, 2).reshape(T, d)
        up = kernels.matmul(t, self.wup, activation="gelu")
        y = kernels.matmul(act_and_mul(up[:, : 2 * d], up[:, 2 * d:]), self.wdown)
        return y + res, lse


def _block_inputs(T=9, d=32, heads=2):
    cos, sin = randn(1, 1, T, d // heads, seed=40), randn(1, 1, T, d // heads, seed=41)
    mask = torch.rand(1, 1, T, T, generator=torch.Generator().manual_seed(42)) > 0.4
    mask[..., 0, :] = False                         # one query row that attends nothing: output 0
    return randn(T, d, seed=43), randn(T, d, seed=44), cos, sin, mask


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    return Block().eval()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_equals_eager(block, backend):
    torch._dynamo.reset()
    inputs = _block_inputs()
    with torch.no_grad():
        ref = block(*inputs)
        compiled = torch.compile(block, backend=backend, fullgraph=True)
        got = compiled(*inputs)
    for r, g in zip(ref, got):
        assert torch.equal(r, g)
    assert not torch.isnan(ref[0]).any()


def test_compile_fullgraph_out_form_and_explicit_config():
    torch._dynamo.reset()
    a, b = randn(7, 40, seed=50), randn(40, 24, seed=51)

    def f(a, b):
        buf = torch.empty(7, 24)
        kernels.matmul(a, b, out=buf, config={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})
        return buf * 2

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(a, b)
    assert torch.equal(got, f(a, b))


@pytest.mark.emulation
def test_compiled_graph_reads_the_context_when_it_runs():
    """Target and policy are read inside the operators at run time: one compiled graph follows
    `numerics(...)` and `use_target(...)` set around the call, with no recompilation."""
    torch._dynamo.reset()
    # enough rows that fast's rms_norm sums round differently from strict's in some row (a cpu
    # matmul chains its dot across tiles, so there the policy leaves its bits alone)
    x, w, b = randn(64, 300, seed=45), randn(300, seed=46), randn(300, 24, seed=47)

    def f(x):
        return kernels.matmul(kernels.rms_norm(x, w), b)

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    fast = compiled(x)
    assert torch.equal(fast, f(x))
    with use_target("kunlun:xpu3"), numerics("strict"):
        kunlun = compiled(x)
        assert torch.equal(kunlun, f(x))
    with numerics("strict"):
        strict = compiled(x)
        assert torch.equal(strict, f(x))
    assert torch.equal(strict, kunlun)          # strict: the same bits on cpu and kunlun
    assert not torch.equal(strict, fast)        # and the policy did change between the calls


def test_compile_fullgraph_with_autograd_equals_eager(block):
    torch._dynamo.reset()
    inputs = _block_inputs()
    x = inputs[0].clone().requires_grad_()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    y, lse = compiled(x, *inputs[1:])
    (y.sum() + lse[torch.isfinite(lse)].sum()).backward()
    gx, gw = x.grad.clone(), block.wqkv.grad.clone()
    x.grad = None
    block.zero_grad()
    y, lse = block(x, *inputs[1:])
    (y.sum() + lse[torch.isfinite(lse)].sum()).backward()
    assert torch.equal(gx, x.grad) and torch.equal(gw, block.wqkv.grad)
    block.zero_grad()


def test_export_equals_eager(block):
    inputs = _block_inputs()
    with torch.no_grad():
        ep = torch.export.export(block, inputs)
        ref = block(*inputs)
        got = ep.module()(*inputs)
    used = {str(n.target) for n in ep.graph.nodes if n.op == "call_function" and "tilejit" in str(n.target)}
    assert {f"tilejit.{n}.default" for n in ("rms_norm", "add_rms_norm", "layer_norm", "matmul", "attention",
                                             "hf_rope", "hf_act_and_mul")} <= used
    for r, g in zip(ref, got):
        assert torch.equal(r, g)


@pytest.mark.integration
def test_compile_inductor_equals_eager(block):
    """One inductor compile (the backend model code uses by default), kept small."""
    torch._dynamo.reset()
    inputs = _block_inputs()
    with torch.no_grad():
        got = torch.compile(block, fullgraph=True)(*inputs)
        ref = block(*inputs)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)   # inductor fuses the torch ops around
    assert torch.equal(got[1], ref[1])


# =============================================================================================
# fake and meta tensors
# =============================================================================================
FAKE_SCRIPT = textwrap.dedent('''
    import torch, kernels
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from compiler.errors import TilejitError
    from kernels import torch_ops
    from kernels.integrations._ops import act_and_mul, rope
    with FakeTensorMode():
        x, w, r = torch.randn(4, 64), torch.randn(64), torch.randn(4, 64)
        a, b = torch.randn(3, 4, 64), torch.randn(64, 48)
        q, kv = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 9, 16)
        outs = [kernels.rms_norm(x, w), *kernels.add_rms_norm(x, r, w), kernels.layer_norm(x, w, w),
                kernels.matmul(a, b, activation="silu"), *kernels.attention(q, kv, kv, causal=True, return_lse=True),
                rope(q, q[:1, :1], q[:1, :1]), act_and_mul(x, r)]
        assert all(isinstance(o, FakeTensor) for o in outs)
        print("shapes", [tuple(o.shape) for o in outs])
        try:
            torch_ops.library_op("rms_norm").run((x, w, 1e-6, None), (torch.empty(4, 64),))
        except TilejitError as e:
            print("fake:", e)
    m = torch.empty(4, 64, device="meta")
    print("meta result", kernels.rms_norm(m, torch.empty(64, device="meta")).device)
    try:
        torch_ops.library_op("rms_norm").run((m, None, 1e-6, None), (torch.empty(4, 64),))
    except TilejitError as e:
        print("meta:", e)
    print("DONE")
''')


@pytest.mark.integration
def test_fake_tensor_mode_gives_shapes_and_a_clean_error_never_a_crash(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    res = subprocess.run([sys.executable, "-c", FAKE_SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr           # a segfault would be a negative return code
    assert "shapes [(4, 64), (4, 64), (4, 64), (4, 64), (3, 4, 48), (2, 4, 5, 16), (2, 4, 5), (2, 4, 5, 16), " \
           "(4, 64)]" in res.stdout
    assert "fake: tilejit::rms_norm: argument 'x' is a FakeTensor (it has no storage)" in res.stdout
    assert "meta result meta" in res.stdout
    assert "meta: tilejit::rms_norm: argument 'x' is a meta tensor (it has no storage)" in res.stdout
    assert "DONE" in res.stdout


@pytest.mark.no_toolchain
def test_float64_runs_the_reference_on_the_operator_but_the_wrapper_refuses_it():
    a, b = randn(5, 7, dtype=torch.float64), randn(7, 3, dtype=torch.float64)
    out = torch.ops.tilejit.matmul(a, b, None, "relu", None, None)
    assert out.dtype == torch.float64 and torch.equal(out, torch.relu(a @ b))
    with pytest.raises(TypeError, match=r"matmul.*'a'.*float64"):
        kernels.matmul(a, b)


@pytest.mark.no_toolchain
def test_config_travels_as_an_operator_argument():
    assert torch_ops.encode_config({"BLOCK_N": 32, "BLOCK_M": 16}) == "BLOCK_M=16,BLOCK_N=32"
    assert torch_ops.decode_config("BLOCK_M=16,BLOCK_N=32") == {"BLOCK_M": 16, "BLOCK_N": 32}
    assert torch_ops.encode_config(None) is None and torch_ops.decode_config(None) is None


def test_plain_eager_calls_skip_the_dispatcher_and_everything_else_sees_the_operator():
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernels.torch_ops import plain_eager

    x, w = randn(4, 64), randn(64)
    assert plain_eager((x, torch.nn.Parameter(w, requires_grad=False), 1e-6, None))
    assert not plain_eager((x.requires_grad_(), w))            # a gradient to record
    with torch.no_grad():
        assert plain_eager((x, w))                              # none under no_grad
    x = x.detach()
    assert not plain_eager((torch.empty(4, 64, device="meta"), w))
    assert torch.vmap(lambda r: torch.tensor(plain_eager((r, w))))(x).tolist() == [False] * 4

    class Seen(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen():
        assert not plain_eager((x, w))
        y = kernels.rms_norm(x, w)
    assert "tilejit.rms_norm.default" in Seen.ops               # a mode still sees the operator
    assert torch.equal(y, kernels.rms_norm(x, w))               # and the direct call gives the same bits


def test_the_out_form_skips_the_dispatcher_in_plain_eager_and_still_bumps_the_version():
    """kernels.matmul(..., out=) writes `out` without the operator in plain eager mode, and bumps its
    version counter as the operator's in-place layer would: autograd refuses a saved tensor it
    overwrote, as it would for any in-place op. A dispatch mode still sees the out operator."""
    from torch.utils._python_dispatch import TorchDispatchMode

    w = torch.randn(4, 4, requires_grad=True)
    saved, h = torch.zeros(4, 4), torch.randn(4, 4)
    z = w * saved   # saves `saved` for the backward
    version = saved._version
    with torch.no_grad():
        kernels.matmul(h, h, out=saved)
    assert saved._version > version and torch.equal(saved, kernels.matmul(h, h))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()

    class Seen(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    out = torch.empty(4, 4)
    with Seen():
        kernels.matmul(h, h, out=out)
    assert "tilejit.matmul_out.default" in Seen.ops
    assert torch.equal(out, saved)
