"""Gradients of the library ops (kernels/*_backward.py, kernels/integrations/_ops.py):

- torch.autograd.gradcheck in float64 (the operators' fp64 reference path: it checks the backward
  formulas the kernels implement against finite differences);
- the fp32 backward kernels against torch's own autograd of the same math;
- deterministic and batch-invariant, bit for bit: a row's (a sequence's) gradient alone equals it
  inside a batch, repeated backward passes give identical bits (weight sums included);
- strict policy: the backward kernels give the same bits on cpu, kunlun (host emulation) and gpu
  (Triton's interpreter);
- a clear error wherever a gradient is not provided, never a silently detached output.
"""
from __future__ import annotations

import math

import pytest
from tiers import on_targets
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import kernels
from compiler import numerics, use_target
from compiler.errors import TilejitError
from kernels import torch_ops
from kernels.integrations._ops import act_and_mul, rope

pytestmark = pytest.mark.compile

F32, F64 = torch.float32, torch.float64
ACT = {None: lambda z: z, "relu": torch.relu, "silu": F.silu, "gelu": lambda z: F.gelu(z, approximate="tanh")}


def randn(*shape, seed=0, dtype=F32, grad=False):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).requires_grad_(grad)


def leaves(*ts):
    return [t.detach().clone().requires_grad_() for t in ts]


def grads_of(fn, inputs, dys):
    """Gradients of every input, for output gradients `dys`."""
    ins = leaves(*inputs)
    outs = fn(*ins)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, dys)
    return [t.grad for t in ins]


def sdpa_ref(q, k, v, causal=False, mask=None):
    """Attention in plain torch (GQA by repeat, bottom-right causal, rows with no key give 0)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    sq, sk = q.shape[2], k.shape[2]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(sk - sq)
    if mask is not None:
        allowed = allowed & mask
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


# =============================================================================================
# gradcheck (float64 reference path of the operators)
# =============================================================================================
@pytest.mark.no_toolchain
@pytest.mark.parametrize("activation", list(ACT), ids=str)
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((5, 7), (2, 7, 3)), ((2, 5, 7), (2, 7, 3))],
                         ids=["2d", "batched-a", "batched-b", "batched-both"])
def test_gradcheck_matmul(shapes, activation):
    a, b = randn(*shapes[0], seed=1, dtype=F64, grad=True), randn(*shapes[1], seed=2, dtype=F64, grad=True)
    bias = randn(3, seed=3, dtype=F64, grad=True)
    assert gradcheck(lambda a, b, bias: torch.ops.tilejit.matmul(a, b, bias, activation, None, None), (a, b, bias))


@pytest.mark.no_toolchain
def test_gradcheck_norms():
    x, r = randn(3, 2, 9, seed=4, dtype=F64, grad=True), randn(3, 2, 9, seed=5, dtype=F64, grad=True)
    w, b = randn(9, seed=6, dtype=F64, grad=True), randn(9, seed=7, dtype=F64, grad=True)
    assert gradcheck(lambda x, w: torch.ops.tilejit.rms_norm(x, w, 1e-6, None), (x, w))
    assert gradcheck(lambda x: torch.ops.tilejit.rms_norm(x, None, 1e-6, None), (x,))
    assert gradcheck(lambda x, r, w: torch.ops.tilejit.add_rms_norm(x, r, w, 1e-6, None), (x, r, w))
    assert gradcheck(lambda x, w, b: torch.ops.tilejit.layer_norm(x, w, b, 1e-5, None), (x, w, b))
    assert gradcheck(lambda x: torch.ops.tilejit.layer_norm(x, None, None, 1e-5, None), (x,))


@pytest.mark.no_toolchain
@pytest.mark.parametrize("hq,hkv,sq,sk,causal", [(4, 2, 6, 6, True), (2, 2, 3, 8, True), (4, 1, 7, 5, False)],
                         ids=["gqa-causal", "decode-like-causal", "mqa"])
def test_gradcheck_attention(hq, hkv, sq, sk, causal):
    q = randn(1, hq, sq, 8, seed=8, dtype=F64, grad=True)
    k, v = randn(1, hkv, sk, 8, seed=9, dtype=F64, grad=True), randn(1, hkv, sk, 8, seed=10, dtype=F64, grad=True)
    # both outputs: out and the logsumexp
    assert gradcheck(lambda q, k, v: torch.ops.tilejit.attention(q, k, v, None, causal, 0.3, True, None), (q, k, v),
                     fast_mode=True)


@pytest.mark.no_toolchain
def test_gradcheck_attention_with_a_mask_and_a_row_that_attends_nothing():
    q = randn(1, 2, 5, 8, seed=11, dtype=F64, grad=True)
    k, v = randn(1, 2, 6, 8, seed=12, dtype=F64, grad=True), randn(1, 2, 6, 8, seed=13, dtype=F64, grad=True)
    mask = torch.rand(1, 1, 5, 6, generator=torch.Generator().manual_seed(14)) > 0.4
    mask[0, 0, 2] = False
    mask[0, 0, 3, 0] = True
    # the row with no key has lse = -inf (no finite difference there): check out only
    assert gradcheck(lambda q, k, v: torch.ops.tilejit.attention(q, k, v, mask, False, 0.3, True, None)[0], (q, k, v),
                     fast_mode=True)


@pytest.mark.no_toolchain
def test_gradcheck_integration_ops():
    x = randn(1, 2, 3, 8, seed=15, dtype=F64, grad=True)
    cos, sin = randn(1, 1, 3, 8, seed=16, dtype=F64), randn(1, 1, 3, 8, seed=17, dtype=F64)
    assert gradcheck(lambda x: torch.ops.tilejit.hf_rope(x, cos, sin, False), (x,))
    g, u = randn(2, 7, seed=18, dtype=F64, grad=True), randn(2, 7, seed=19, dtype=F64, grad=True)
    for act in ("silu", "gelu"):
        assert gradcheck(lambda g, u: torch.ops.tilejit.hf_act_and_mul(g, u, act), (g, u))


# =============================================================================================
# fp32 backward kernels against torch's autograd
# =============================================================================================
def assert_grads_close(got, ref, rtol=2e-5):
    for g, r in zip(got, ref):
        assert g.shape == r.shape and not torch.isnan(g).any()
        torch.testing.assert_close(g, r, rtol=rtol, atol=rtol * max(1.0, r.abs().max().item()))


@pytest.mark.sampled
@pytest.mark.parametrize("activation", list(ACT), ids=str)
@pytest.mark.parametrize("shapes", [((37, 70), (70, 19)), ((3, 37, 70), (70, 19)), ((37, 70), (3, 70, 19)),
                                    ((1, 37, 70), (3, 70, 19))],
                         ids=["2d", "shared-weight", "shared-a", "broadcast-batch"])
def test_matmul_grads_match_torch(shapes, activation):
    a, b, bias = randn(*shapes[0], seed=20), randn(*shapes[1], seed=21), randn(19, seed=22)
    dc = randn(*torch.broadcast_shapes(shapes[0][:-2], shapes[1][:-2]), 37, 19, seed=23)
    got = grads_of(lambda a, b, bias: kernels.matmul(a, b, bias, activation), (a, b, bias), [dc])
    ref = grads_of(lambda a, b, bias: ACT[activation](torch.matmul(a, b) + bias), (a, b, bias), [dc])
    assert_grads_close(got, ref)


@pytest.mark.parametrize("n", [70, 2000])
def test_norm_grads_match_torch(n):
    x, r, w, b = randn(3, 5, n, seed=24), randn(3, 5, n, seed=25), randn(n, seed=26), randn(n, seed=27)
    dy, ds = randn(3, 5, n, seed=28), randn(3, 5, n, seed=29)

    def rms_eager(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    assert_grads_close(grads_of(lambda x, w: kernels.rms_norm(x, w), (x, w), [dy]), grads_of(rms_eager, (x, w), [dy]))
    assert_grads_close(grads_of(lambda x, w, b: kernels.layer_norm(x, w, b), (x, w, b), [dy]),
                       grads_of(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), (x, w, b), [dy]))
    assert_grads_close(grads_of(lambda x, r, w: kernels.add_rms_norm(x, r, w), (x, r, w), [dy, ds]),
                       grads_of(lambda x, r, w: (rms_eager(x + r, w), x + r), (x, r, w), [dy, ds]))


def test_norm_grads_bf16_match_torch():
    x, w = randn(4, 300, seed=30, dtype=torch.bfloat16), randn(300, seed=31, dtype=torch.bfloat16)
    dy = randn(4, 300, seed=32, dtype=torch.bfloat16)
    got = grads_of(lambda x, w: kernels.rms_norm(x, w), (x, w), [dy])
    ref = grads_of(lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
                                 * w.float()), (x, w), [dy.float()])
    for g, r in zip(got, ref):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), r.float(), rtol=2e-2, atol=2e-2 * r.abs().max().item())


@pytest.mark.parametrize("b,hq,hkv,sq,sk,d,causal,masked", [
    (2, 4, 2, 37, 37, 16, True, False), (1, 2, 2, 5, 40, 24, True, False), (2, 6, 2, 33, 20, 64, False, False),
    (2, 4, 1, 9, 9, 16, False, True), (1, 2, 1, 20, 12, 32, True, False)],
    ids=["gqa-causal", "chunk-causal", "gqa", "mqa-mask", "more-queries-than-keys"])
def test_attention_grads_match_torch(b, hq, hkv, sq, sk, d, causal, masked):
    q, k, v = randn(b, hq, sq, d, seed=33), randn(b, hkv, sk, d, seed=34), randn(b, hkv, sk, d, seed=35)
    mask = None
    if masked:
        mask = torch.rand(b, 1, sq, sk, generator=torch.Generator().manual_seed(36)) > 0.3
        mask[-1, 0, 3] = False
    do = randn(b, hq, sq, d, seed=37)
    got = grads_of(lambda q, k, v: kernels.attention(q, k, v, causal=causal, mask=mask), (q, k, v), [do])
    ref = grads_of(lambda q, k, v: sdpa_ref(q, k, v, causal, mask), (q, k, v), [do])
    assert_grads_close(got, ref)


def test_attention_lse_gradient():
    q, k, v = randn(1, 2, 6, 16, seed=38), randn(1, 2, 6, 16, seed=39), randn(1, 2, 6, 16, seed=40)
    do, dl = randn(1, 2, 6, 16, seed=41), randn(1, 2, 6, seed=42)

    def ref(q, k, v):
        s = q @ k.transpose(-1, -2) / 4.0
        return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)
    got = grads_of(lambda q, k, v: kernels.attention(q, k, v, return_lse=True), (q, k, v), [do, dl])
    assert_grads_close(got, grads_of(ref, (q, k, v), [do, dl]))


def test_integration_op_grads_match_torch():
    x = randn(2, 4, 6, 16, seed=43).transpose(1, 2).contiguous().transpose(1, 2)    # strided, as in a model
    cos, sin = randn(2, 1, 6, 16, seed=44), randn(2, 1, 6, 16, seed=45)
    dy = randn(2, 4, 6, 16, seed=46)
    got = grads_of(lambda x: rope(x, cos, sin), (x,), [dy])
    assert torch.equal(got[0], grads_of(lambda x: x * cos + rotate_half(x) * sin, (x,), [dy])[0])
    g, u, dy2 = randn(3, 5, 40, seed=47), randn(3, 5, 40, seed=48), randn(3, 5, 40, seed=49)
    for act, fn in (("silu", F.silu), ("gelu", ACT["gelu"])):
        assert_grads_close(grads_of(lambda g, u: act_and_mul(g, u, act), (g, u), [dy2]),
                           grads_of(lambda g, u: fn(g) * u, (g, u), [dy2]))


# =============================================================================================
# determinism and batch invariance, bit for bit
# =============================================================================================
def test_backward_is_deterministic_and_row_grads_are_batch_invariant():
    n, rows = 300, 24
    X, w, b, dY = randn(rows, n, seed=50), randn(n, seed=51), randn(n, seed=52), randn(rows, n, seed=53)
    B = randn(n, 48, seed=54)
    cases = {
        "rms_norm": lambda x, w: kernels.rms_norm(x, w),
        "layer_norm": lambda x, w: kernels.layer_norm(x, w, b),
        "matmul": lambda x, w: kernels.matmul(x * w, B, activation="silu"),
    }
    for name, fn in cases.items():
        dy = dY if name != "matmul" else dY[:, :48]
        alone = torch.cat([grads_of(fn, (X[i:i + 1], w), [dy[i:i + 1]])[0] for i in range(rows)])
        for m in (2, 17, rows):
            assert torch.equal(grads_of(fn, (X[:m], w), [dy[:m]])[0], alone[:m]), (name, m)
        first = grads_of(fn, (X, w), [dy])
        for _ in range(3):   # the weight gradient (a sum over rows) too
            again = grads_of(fn, (X, w), [dy])
            assert all(torch.equal(f, a) for f, a in zip(first, again)), name


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_attention_grads_of_a_sequence_do_not_depend_on_its_batch(policy):
    q, k, v = randn(4, 4, 19, 16, seed=55), randn(4, 2, 19, 16, seed=56), randn(4, 2, 19, 16, seed=57)
    do = randn(4, 4, 19, 16, seed=58)

    def fn(q, k, v):
        return kernels.attention(q, k, v, causal=True)
    with numerics(policy):
        full = grads_of(fn, (q, k, v), [do])
        for i in range(4):
            one = grads_of(fn, (q[i:i + 1], k[i:i + 1], v[i:i + 1]), [do[i:i + 1]])
            assert all(torch.equal(o, f[i:i + 1]) for o, f in zip(one, full)), i


def _strict_backward_cases():
    x, w, r = randn(5, 200, seed=60), randn(200, seed=61), randn(5, 200, seed=62)
    a, b, bias = randn(2, 9, 40, seed=63), randn(40, 24, seed=64), randn(24, seed=65)
    q, k, v = randn(1, 4, 9, 32, seed=66), randn(1, 2, 9, 32, seed=67), randn(1, 2, 9, 32, seed=68)
    return {
        "add_rms_norm": (lambda x, r, w: kernels.add_rms_norm(x, r, w), (x, r, w),
                         [randn(5, 200, seed=69), randn(5, 200, seed=70)]),
        "layer_norm": (lambda x, w, b: kernels.layer_norm(x, w, b), (x, w, w), [randn(5, 200, seed=71)]),
        "matmul": (lambda a, b, bias: kernels.matmul(a, b, bias, "gelu"), (a, b, bias), [randn(2, 9, 24, seed=72)]),
        "attention": (lambda q, k, v: kernels.attention(q, k, v, causal=True), (q, k, v),
                      [randn(1, 4, 9, 32, seed=73)]),
    }


@pytest.mark.sampled
@pytest.mark.parametrize("target", on_targets("kunlun:xpu3", "gpu:interpret"))
@pytest.mark.parametrize("case", sorted(_strict_backward_cases()))
def test_strict_backward_is_bitwise_equal_across_targets(case, target):
    fn, inputs, dys = _strict_backward_cases()[case]
    with numerics("strict"):
        ref = grads_of(fn, inputs, dys)
        with use_target(target):
            got = grads_of(fn, inputs, dys)
    assert all(torch.equal(g, r) for g, r in zip(got, ref)), target


# =============================================================================================
# no silent detach
# =============================================================================================
def test_out_form_refuses_grad_mode():
    a, b = randn(4, 8, seed=80, grad=True), randn(8, 3, seed=81)
    with pytest.raises(TilejitError, match=r"matmul: out= records no gradient"):
        kernels.matmul(a, b, out=torch.empty(4, 3))
    with torch.no_grad():
        kernels.matmul(a, b, out=torch.empty(4, 3))     # inference: fine


def test_outputs_carry_a_gradient():
    x, w = randn(4, 8, seed=82, grad=True), randn(8, seed=83, grad=True)
    for y in (kernels.rms_norm(x, w), kernels.layer_norm(x, w), *kernels.add_rms_norm(x, x, w),
              kernels.matmul(x, w[:, None]), kernels.attention(*(x[None, None],) * 3)):
        assert y.requires_grad and y.grad_fn is not None


def test_no_gradient_where_none_is_provided_is_a_clear_error():
    x = randn(1, 2, 3, 8, seed=84, grad=True)
    cos = randn(1, 1, 3, 8, seed=85, grad=True)
    with pytest.raises(TilejitError, match=r"hf_rope: no gradient with respect to 'cos'"):
        rope(x, cos, cos.detach())
    # a backward operator has no gradient of its own: double backward says so
    w = randn(8, seed=86, grad=True)
    y = kernels.rms_norm(x, w)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=False)
    assert gx.grad_fn is None
    with pytest.raises(TilejitError, match=r"tilejit::rms_norm_backward has no gradient"):
        torch.autograd.grad(kernels.rms_norm(x, w).sum(), x, create_graph=True)


_NOGRAD = {}


@pytest.mark.no_toolchain
def test_an_operator_defined_without_backward_refuses_grad_mode():
    if not _NOGRAD:   # a toy operator registered through the same one call as the library's
        _NOGRAD["op"] = torch_ops.define(
            "test_scale_no_grad", "Tensor x, float a", ("y",), shapes=lambda x, a: ((x.shape, x.dtype),),
            launch=lambda x, a, y: y.copy_(x * a))
    op = _NOGRAD["op"]
    x = randn(4, seed=87, grad=True)
    with pytest.raises(TilejitError, match=r"tilejit::test_scale_no_grad has no gradient.*torch.no_grad"):
        op.op(x, 2.0)
    with torch.no_grad():
        assert torch.equal(op.op(x, 2.0), x.detach() * 2)
