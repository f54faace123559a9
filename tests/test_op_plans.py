"""Launch plans (kernels/op_plans.py): after the first plain eager call of an argument signature, a
library op replays that call's kernel launches instead of running its host code again.

- every registered library op gets a plan for its sample call, and the replay equals the body bit
  for bit, in both numerics policies;
- anything the signature does not pin goes through the body: a value read on the host, a copy,
  a changed context (policy, target, tuned decisions), a rebound global of a kernel, a
  render_only block, aliased arguments, an unhashable argument, a call that raised;
- the C signature and replay (compiler/fastpath/tjfast.c) agree with their Python references.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from test_torch_ops import LIBRARY_OPS, _samples

import kernels
from compiler import fastpath, kernel, language as tl, numerics, render_only
from compiler.launch_record import recording
from kernels import configs, op_plans, torch_ops

pytestmark = pytest.mark.compile

F32 = torch.float32


def randn(*shape, seed=0, dtype=F32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _outs(r):
    return r if isinstance(r, tuple) else (r,)


def _plan_of(lop, args):
    return lop.plans.get(op_plans.signature(args), "no entry")


@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.parametrize("name", LIBRARY_OPS)
@pytest.mark.sampled
def test_every_library_op_replays_its_first_call_bit_for_bit(name, policy):
    lop = torch_ops.library_op(name)
    args = _samples(False)[name]
    with numerics(policy), torch.no_grad():
        lop.plans.clear()
        first = _outs(lop(*args))
        plan = _plan_of(lop, args)
        assert isinstance(plan, op_plans.Plan), f"{name}: no plan ({plan})"
        with recording() as launches:
            replayed = _outs(lop(*args))
        assert launches == []                       # the replay ran no Python launch path
        body = _outs(lop.body(*args))
    for a, b, c in zip(first, replayed, body):
        assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
        assert torch.equal(a, b) and torch.equal(b, c)


def test_a_replay_computes_on_the_new_values_and_allocates_fresh_outputs():
    x, w = randn(4, 96, seed=1), randn(96, seed=2)
    y1 = kernels.rms_norm(x, w)
    x2, w2 = randn(4, 96, seed=3), randn(96, seed=4)
    y2 = kernels.rms_norm(x2, w2)
    assert isinstance(_plan_of(kernels.norm.RMS_NORM_OP, (x2, w2, 1e-6, None)), op_plans.Plan)
    assert y2.data_ptr() != y1.data_ptr()
    assert torch.equal(y2, kernels.norm.RMS_NORM_OP.body(x2, w2, 1e-6, None))
    assert torch.allclose(y2, kernels.norm.rms_norm_ref(x2, w2), atol=1e-5)


def test_the_context_is_part_of_the_signature():
    x, w = randn(3, 200, seed=5), randn(200, seed=6)
    args = (x, w, 1e-6, None)
    lop = kernels.norm.RMS_NORM_OP
    fast = kernels.rms_norm(x, w)
    key_fast = op_plans.signature(args)
    with numerics("strict"):
        assert op_plans.signature(args) != key_fast
        strict = kernels.rms_norm(x, w)
        assert torch.equal(kernels.rms_norm(x, w), strict)   # the strict plan
        assert torch.equal(strict, lop.body(*args))
    with configs.tuned_decisions(False):
        assert op_plans.signature(args) != key_fast
    assert torch.equal(kernels.rms_norm(x, w), fast)


def test_an_explicit_config_is_replayed_as_that_config():
    x, w = randn(2, 512, seed=7), randn(512, seed=8)
    small = kernels.rms_norm(x, w, config={"BLOCK": 16})
    again = kernels.norm.RMS_NORM_OP(x, w, 1e-6, "BLOCK=16")
    assert torch.equal(small, again)
    assert isinstance(_plan_of(kernels.norm.RMS_NORM_OP, (x, w, 1e-6, "BLOCK=16")), op_plans.Plan)


def test_an_explicit_config_is_checked_once_per_config_and_types_count():
    """The wrappers turn config= into the op's string once per (op, items, value types): a seen
    config replays like a call without one, and a config equal to a seen one but for a value's type
    (True == 1, 16.0 == 16) or for the op is still checked and refused."""
    from kernels.checks import config_text
    x, w = randn(2, 512, seed=7), randn(512, seed=8)
    assert config_text("rms_norm", kernels.norm.RMS_NORM, {"BLOCK": 1}) == "BLOCK=1"
    assert config_text("rms_norm", kernels.norm.RMS_NORM, None) is None
    assert torch.equal(kernels.rms_norm(x, w, config={"BLOCK": 16}), kernels.rms_norm(x, w, config={"BLOCK": 16}))
    for bad, why in (({"BLOCK": True}, "BLOCK=True is not an int"), ({"BLOCK": 16.0}, "BLOCK=16.0 is not an int"),
                     ({"BLOCK": [16]}, "is not an int"), ({"BLOCK_M": 16}, "lacks BLOCK")):
        with pytest.raises(ValueError, match=why):
            kernels.rms_norm(x, w, config=bad)
    with pytest.raises(ValueError, match="matmul: config .* lacks"):   # seen for rms_norm, not for matmul
        kernels.matmul(x, randn(512, 4), config={"BLOCK": 16})


# --- what the signature does not pin goes through the body ------------------------------------
@kernel
def _scale_kernel(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * a + OFFSET, mask=m)


OFFSET = 1.0
_TOY: dict = {}


def _toy_ops():
    """Two toy ops through the library's one `define`: one whose launch depends only on metadata,
    one whose launch reads a value of its input (the scale is x's first element)."""
    if not _TOY:
        def launch(x, a, y):
            _scale_kernel[(triton_cdiv(x.numel(), 64),)](x, y, x.numel(), a, BLOCK=64)

        def launch_by_value(x, a, y):
            _scale_kernel[(triton_cdiv(x.numel(), 64),)](x, y, x.numel(), float(x[0]), BLOCK=64)

        shapes = lambda x, a: ((x.shape, x.dtype),)   # noqa: E731
        _TOY["meta"] = torch_ops.define("test_plan_scale", "Tensor x, float a", ("y",), shapes=shapes, launch=launch)
        _TOY["value"] = torch_ops.define("test_plan_scale_by_value", "Tensor x, float a", ("y",), shapes=shapes,
                                         launch=launch_by_value)
    return _TOY["meta"], _TOY["value"]


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_a_launch_that_reads_a_value_gets_no_plan_and_sees_every_new_value():
    _, op = _toy_ops()
    x = torch.tensor([2.0, 1.0, 3.0])
    assert torch.equal(op(x, 0.0), x * 2 + OFFSET)
    assert _plan_of(op, (x, 0.0)) is None
    x2 = torch.tensor([5.0, 1.0, 3.0])
    assert torch.equal(op(x2, 0.0), x2 * 5 + OFFSET)


def test_a_rebound_global_of_a_replayed_kernel_recompiles():
    global OFFSET
    op, _ = _toy_ops()
    x = randn(100, seed=9)
    assert torch.equal(op(x, 2.0), x * 2 + 1.0)
    assert torch.equal(op(x, 2.0), x * 2 + 1.0)
    assert isinstance(_plan_of(op, (x, 2.0)), op_plans.Plan)   # that call replayed
    OFFSET = 5.0
    try:
        assert torch.equal(op(x, 2.0), x * 2 + 5.0)      # the plan noticed, recompiled, recorded anew
        assert torch.equal(op(x, 2.0), x * 2 + 5.0)
        assert isinstance(_plan_of(op, (x, 2.0)), op_plans.Plan)
    finally:
        OFFSET = 1.0
    assert torch.equal(op(x, 2.0), x * 2 + 1.0)


@pytest.mark.no_toolchain
def test_scalars_of_equal_value_but_other_type_are_other_signatures():
    x = randn(10, seed=10)
    assert op_plans.signature((x, 2.0)) != op_plans.signature((x, 2))
    assert op_plans.signature((x, 1)) != op_plans.signature((x, True))


def test_aliased_arguments_never_leave_a_plan_that_mixes_them_up():
    lop = kernels.norm.ADD_RMS_NORM_OP
    x = randn(2, 64, seed=11)
    y, _ = lop(x, x, None, 1e-6, None)                   # the same tensor twice: no plan from it
    assert _plan_of(lop, (x, x, None, 1e-6, None)) is None
    a, b = randn(2, 64, seed=12), randn(2, 64, seed=13)
    lop.plans.clear()
    lop(a, b, None, 1e-6, None)
    ya, sa = lop(a, b, None, 1e-6, None)                 # replayed
    assert torch.equal(sa, a + b) and torch.equal(ya, lop.body(a, b, None, 1e-6, None)[0])
    y2, s2 = lop(x, x, None, 1e-6, None)                 # the same signature, aliased again
    assert torch.equal(s2, x + x) and torch.equal(y2, y)


@pytest.mark.no_toolchain
def test_a_call_that_raised_leaves_no_plan_and_raises_again():
    x, w = randn(2, 64, seed=14), randn(63, seed=15)
    for _ in range(2):
        with pytest.raises(ValueError, match="weight has 63 elements, expected 64"):
            kernels.rms_norm(x, w)
    assert _plan_of(kernels.norm.RMS_NORM_OP, (x, w, 1e-6, None)) == "no entry"


def test_render_only_renders_instead_of_replaying():
    x, w = randn(2, 64, seed=16), randn(64, seed=17)
    kernels.rms_norm(x, w)
    kernels.rms_norm(x, w)
    with render_only() as seen:
        kernels.rms_norm(x, w)
    assert len(seen) == 1 and "rms_norm_kernel" in seen[0].name


def test_grad_mode_and_tensor_subclasses_take_the_operator():
    x, w = randn(2, 64, seed=18).requires_grad_(), randn(64, seed=19)
    kernels.rms_norm(x.detach(), w)
    y = kernels.rms_norm(x, w)
    assert y.grad_fn is not None
    assert op_plans.signature((x, w, 1e-6, None)) is None
    assert op_plans.signature((torch.empty(2, 64, device="meta"), w, 1e-6, None)) is None


def test_under_torch_profiler_each_op_and_kernel_launch_is_a_record():
    """A replayed call never enters the dispatcher, so torch.profiler would not see it: while the
    profiler runs, library ops take the operator (one record, tilejit::<op>) and every kernel
    launch, a library op's or a user's, is a record named after the kernel; the bits stay."""
    x, w = randn(3, 64, seed=30), randn(64, seed=31)
    want = kernels.rms_norm(x, w)
    assert isinstance(_plan_of(kernels.norm.RMS_NORM_OP, (x, w, 1e-6, None)), op_plans.Plan)
    o = torch.empty(3 * 64)
    _scale_kernel[(3,)](x.reshape(-1), o, x.numel(), 2.0, BLOCK=64)
    with torch.profiler.profile() as prof:
        got = kernels.rms_norm(x, w)
        _scale_kernel[(3,)](x.reshape(-1), o, x.numel(), 2.0, BLOCK=64)
        assert op_plans.signature((x, w, 1e-6, None)) is None
    names = {e.key for e in prof.key_averages()}
    assert {"tilejit::rms_norm", "tilejit.kernel:rms_norm_kernel", "tilejit.kernel:_scale_kernel"} <= names
    assert torch.equal(got, want) and torch.equal(o, x.reshape(-1) * 2.0 + OFFSET)
    assert op_plans.signature((x, w, 1e-6, None)) is not None   # plain again once it stops


def test_an_unhashable_argument_runs_the_body():
    a, b = randn(16, 32, seed=20), randn(32, 48, seed=27)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
    assert torch_ops.library_op("matmul").replayed(a, b, None, None, None, cfg) is op_plans.MISS
    first = kernels.matmul(a, b, config=cfg)
    assert torch.equal(kernels.matmul(a, b, config=cfg), first)


# --- the C paths agree with their Python references ---------------------------------------------
needs_c = pytest.mark.skipif(fastpath.fast_module() is None, reason="the compiled launch path is unavailable")


@needs_c
def test_the_c_signature_equals_the_python_signature():
    x, p = randn(3, 4, seed=21), torch.nn.Parameter(randn(4, seed=22), requires_grad=False)
    cases = [(x, p, 1e-6, None, "BLOCK=16", 3, True), (x.t(), x[1:], x[:, 1]), (), (2.0, 2, True),
             (torch.empty(2, device="meta"),), (x.to_sparse(),)]
    for args in cases:
        assert op_plans.signature(args) == op_plans.signature_py(args)
    assert op_plans.signature((x.to_sparse(),)) is None   # sparse: the operator path explains it
    with warnings.catch_warnings():   # (the nested tensor API is a prototype)
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([x[0], x[1, :2]])
    assert nested.layout == torch.strided   # strided, but without strides: the operator path too
    assert op_plans.signature((nested,)) is None and op_plans.signature_py((nested,)) is None
    assert op_plans.signature((torch.empty(2, device="meta"),)) is None
    g = randn(3, seed=23).requires_grad_()
    assert op_plans.signature((g,)) is None and op_plans.signature_py((g,)) is None
    with torch.no_grad():
        assert op_plans.signature((g,)) == op_plans.signature_py((g,)) is not None


@needs_c
def test_the_c_replay_equals_the_python_replay():
    lop = kernels.norm.LAYER_NORM_OP
    x, w, b = randn(5, 72, seed=24), randn(72, seed=25), randn(72, seed=26)
    args = (x, w, b, 1e-5, None)
    lop(*args)
    plan = _plan_of(lop, args)
    outs = [torch.full((5, 72), float("nan")) for _ in range(2)]
    fastpath.fast_module().replay(plan.launches, args + (outs[0],))
    op_plans.replay_py(plan.launches, args + (outs[1],))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], lop.body(*args))


@needs_c
def test_the_c_hit_path_equals_the_python_one_and_leaves_plans_with_views_to_python():
    lop = kernels.norm.ADD_RMS_NORM_OP
    args = (randn(3, 80, seed=28), randn(3, 80, seed=29), randn(80, seed=30), 1e-6, None)
    lop(*args)
    c, py = op_plans._replayed(lop.plans, args), op_plans.replayed_py(lop.plans, args)
    assert all(torch.equal(a, b) for a, b in zip(c, py)) and len(c) == 2
    att = torch_ops.library_op("attention")
    q, k, v = randn(1, 2, 5, 16, seed=31), randn(1, 2, 7, 16, seed=32), randn(1, 2, 7, 16, seed=33)
    mask = torch.rand(1, 1, 5, 7, generator=torch.Generator().manual_seed(34)) > 0.3
    a_args = (q, k, v, mask, False, 0.25, False, None)
    first = att(*a_args)
    assert _plan_of(att, a_args).views                       # the bool mask is read as int8
    assert op_plans._replayed(att.plans, a_args) is op_plans.MISS
    assert torch.equal(op_plans.replayed_py(att.plans, a_args)[0], first[0])
    assert torch.equal(att(*a_args)[0], first[0])
