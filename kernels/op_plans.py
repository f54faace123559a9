"""Launch plans: a library op's host work done once per argument signature.

What a library op does on the host before its kernels run (argument checks, views, the config
lookup, grid arithmetic) depends only on its arguments' metadata (dtype, shape, strides, device),
its scalar arguments and tilejit's context (`kernels.configs.context()`: target, policy, tuned
decisions, cache settings). For one such signature the outcome is a fixed list of kernel
launches, so the first plain eager call of a signature runs the op body while it records them
(compiler/launch_record.py), and later calls of the signature allocate the outputs and replay
the launches: the same compiled kernels, grids and arguments, with this call's tensors in the
tensor slots. The results are the body's, bit for bit; what is skipped is the Python around the
launches (a warm rms_norm call: ~45 us -> a few; `python -m benchmarks.dispatch`).

A signature gets no plan (and keeps running the body, which is always correct) when its first
call shows that the body's outcome may depend on more than the signature, or does work a replay
would skip:

- the body ran a torch operator other than a view or torch.empty (a TorchDispatchMode watches
  it): reading values (`.item()`, the range check of an index tensor), a copy, a fill. The
  buffers torch.empty made (a launch's scratch) a replay allocates anew, as the outputs;
- a kernel got a tensor whose data pointer is not that of one of the op's tensor arguments,
  outputs or scratch buffers (a reinterpreting view of the same element size is fine: a bool
  mask read as int8), or two of those share a data pointer.

A launched kernel that read Python globals (compiler.captured) is checked on each replay as the
warm launch path checks it: when one was rebound, the plan is dropped and the call records anew
(and so recompiles).

The contract this puts on an op's launch code: read tensor values only through torch operators,
and never derive a kernel argument from a data pointer. tests/test_op_plans.py checks replays
against the body for every op whose signature gets a plan.
"""
from __future__ import annotations

import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compiler.captured import is_current
from compiler.fastpath import fast_module
from compiler.jit import dry_launches
from compiler.launch_record import recording

from . import outputs
from .configs import context

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_META = torch.device("meta")
_DEVICES = (_META, torch.device("cpu"))   # what the C signature compares with and puts in keys
_UNSEEN = object()
MISS = object()    # what `replayed` returns when it did not run the op
STALE = object()   # what a plan returns when a kernel it replays must recompile
MAX_PLANS = 512   # per op; the memo is dropped when full (a model has a few shapes per op)


# each is falsy in plain eager mode: torch.compile/export, jit tracing, a dispatch mode
# (FakeTensorMode, FlopCounterMode, ...), a function mode, a functorch transform (vmap, grad),
# and torch.profiler running (through the operator, each call is recorded as tilejit::<op>).
# The hit path (`hit_path`) asks torch.compiler.is_compiling in Python, where dynamo sees it.
_NOT_PLAIN_BESIDES_COMPILING = (torch._C._is_tracing, torch._C._len_torch_dispatch_stack,
                                torch._C._is_torch_function_mode_enabled, torch._C._functorch.peek_interpreter_stack,
                                torch.autograd._profiler_enabled)
_NOT_PLAIN = (torch.compiler.is_compiling, *_NOT_PLAIN_BESIDES_COMPILING)


def signature_py(args) -> tuple | None:
    """The plan key of an op call, or None when the call is not plain eager (anything that traces
    or transforms would see the operator (`_NOT_PLAIN`); a tensor subclass, a tensor that is not
    strided or has no strides (sparse, mkldnn, nested: the operator path explains) or is on the
    meta device; a gradient to record). compiler/fastpath/tjfast.c (`signature`) computes the same
    in C."""
    if any(check() for check in _NOT_PLAIN):
        return None
    grad = torch.is_grad_enabled()
    key = [context()]
    for a in args:
        cls = a.__class__
        if cls in _PLAIN:
            if a.layout != torch.strided or (grad and a.requires_grad):
                return None
            try:
                strides = a.stride()
            except RuntimeError:
                return None
            if a.device == _META:
                return None
            key.append((a.dtype, a.shape, strides, a.device))
        elif isinstance(a, torch.Tensor):
            return None
        else:
            key.append((cls, a))   # 1, 1.0 and True are equal keys but not the same argument
    return tuple(key)


def _compiled_signature():
    mod = fast_module()
    if mod is None:
        return signature_py
    fast, plain, is_grad, tensor = mod.signature, _PLAIN, torch.is_grad_enabled, torch.Tensor
    return lambda args: fast(args, context(), _NOT_PLAIN, is_grad, plain, tensor, torch.strided, _DEVICES)


signature = _compiled_signature()


def replay_py(launches, tensors):
    """Runs a plan's launches: each (launcher, grid, template, slots, captured), where slots is
    (arg index, tensor index, ...) flat and the template holds the other arguments. False (and
    nothing ran) when a kernel's captured globals were rebound, else None. compiler/fastpath/
    tjfast.c (`replay`) does the same in C."""
    # by identity only, as the compiled warm path: a rebound equal scalar drops the plan, and the
    # launch that records it anew notes the new object (compiler.captured.still_current)
    if not all(is_current(launch[4]) for launch in launches):
        return False
    for launcher, grid, template, slots, _ in launches:
        values = list(template)
        for k in range(0, len(slots), 2):
            values[slots[k]] = tensors[slots[k + 1]]
        launcher(grid, values)
    return None


_replay = getattr(fast_module(), "replay", replay_py)


class Plan:
    """Allocate the outputs, then replay the recorded launches with this call's tensors."""

    __slots__ = ("allocs", "n_out", "views", "launches", "packed")

    def __init__(self, allocs, n_out, views, launches):
        # (kernels.outputs.maker, ...): the outputs', then the scratch buffers'; tensor slots
        # count the arguments, these, then the views
        self.allocs = allocs
        self.n_out = n_out
        self.views = views          # ((tensor slot, dtype), ...): reinterpreted tensors (a bool mask as int8)
        self.launches = launches    # as replay_py takes them
        # what compiler/fastpath/tjfast.c (`replayed`) runs itself: plans without views
        self.packed = None if views else (allocs, n_out, launches)

    def __call__(self, args):
        new = tuple([make() for make in self.allocs])
        tensors = args + new
        if self.views:
            tensors += tuple([tensors[s].view(dt) for s, dt in self.views])
        if _replay(self.launches, tensors) is False:
            return STALE
        return new[0] if self.n_out == 1 else new[:self.n_out]


_EMPTY = (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default)


class _OperatorWatch(TorchDispatchMode):
    """Notes every torch operator that is not a view; fresh uninitialised tensors (torch.empty,
    the scratch buffers of a launch) are kept apart, as a replay allocates them anew."""

    def __init__(self):
        super().__init__()
        self.seen, self.scratch = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _EMPTY:
            self.scratch.append(out)
        elif not func.is_view:
            self.seen.append(func)
        return out


def _lookup(lop, key):
    try:
        return lop.plans.get(key, _UNSEEN)
    except TypeError:   # an unhashable scalar argument: never a plan
        return None


def replayed_py(plans: dict, args):
    """The hit path of a call: the outputs when `plans` holds a plan for the signature of `args`
    and it replayed, else MISS (not plain eager, no plan, a dry block, a kernel to recompile).
    compiler/fastpath/tjfast.c (`replayed`) does the same in C for plans without views."""
    key = signature(args)
    if key is None:
        return MISS
    try:
        plan = plans.get(key)
    except TypeError:
        return MISS
    if plan is None or dry_launches():
        return MISS
    out = plan(args)
    return MISS if out is STALE else out


def _compiled_replayed():
    """(plans, args) -> outputs or MISS, for callers that have asked torch.compiler.is_compiling:
    the C hit path with its constants bound (a partial: no Python frame)."""
    fast = getattr(fast_module(), "replayed", None)
    if fast is None:
        return replayed_py
    return functools.partial(fast, context, _NOT_PLAIN_BESIDES_COMPILING, torch.is_grad_enabled, _PLAIN, torch.Tensor,
                             torch.strided, _DEVICES, dry_launches, MISS)


_replayed = _compiled_replayed()


def hit_path(plans: dict):
    """An op's `replayed(*args)`: its outputs when a plan in `plans` for the signature of `args`
    replayed, else MISS. What a wrapper tries before its own argument checks, which a signature's
    first call has passed; one Python frame before the C hit path."""
    is_compiling, replay = torch.compiler.is_compiling, functools.partial(_replayed, plans)

    def replayed(*args):
        if is_compiling():   # dynamo traces this far and no further (the hit path is C)
            return MISS
        return replay(args)
    return replayed


def call(lop, args):
    """The functional op `lop` (a torch_ops.LibraryOp) on `args`: replayed, recorded, or through
    the torch operator when the call is not plain eager."""
    if torch.compiler.is_compiling():
        return lop.op(*args)
    out = _replayed(lop.plans, args)
    if out is not MISS:
        return out
    key = signature(args)
    if key is None:
        return lop.op(*args)
    plan = _lookup(lop, key)
    if plan is None or dry_launches():
        return lop.body(*args)
    if plan is not _UNSEEN and plan.packed is None:   # a plan with views: the C hit path leaves it here
        out = plan(args)
        if out is not STALE:
            return out
    return _first_call(lop, key, args)   # no plan yet, or a kernel of it must recompile


def _first_call(lop, key, args):
    outs = lop.alloc(*args)
    with recording() as launches, _OperatorWatch() as watch:
        lop.run(args, outs)
    plans = lop.plans
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = None if watch.seen else _plan(launches, args, outs, tuple(watch.scratch))
    return outs[0] if len(outs) == 1 else outs


def _plan(launches, args, outs, scratch) -> Plan | None:
    if not all(t.stride() == _row_major(t.shape) for t in outs + scratch):
        return None   # only fresh row-major outputs replay (a permuted or offset one may be a view the body made)
    tensors = args + outs + scratch
    slot_of = {}
    for s, t in enumerate(tensors):
        if isinstance(t, torch.Tensor):
            if t.data_ptr() in slot_of:
                return None
            slot_of[t.data_ptr()] = s
    views: list = []   # (slot, dtype): a kernel reads an argument reinterpreted (bool mask as int8)
    replay = []
    for ck, grid, bound in launches:
        template, slots = list(bound), []
        for i, v in enumerate(bound):
            if isinstance(v, torch.Tensor):
                s = slot_of.get(v.data_ptr())
                if s is None or v.element_size() != tensors[s].element_size():
                    return None
                if v.dtype != tensors[s].dtype:
                    if (s, v.dtype) not in views:
                        views.append((s, v.dtype))
                    s = len(tensors) + views.index((s, v.dtype))
                template[i] = None
                slots += (i, s)
        replay.append((ck.launcher, grid, tuple(template), tuple(slots), ck.captured))
    allocs = tuple(outputs.maker(t.shape, t.stride(), t.dtype, t.device) for t in outs + scratch)
    return Plan(allocs, len(outs), tuple(views), tuple(replay))


def _row_major(shape) -> tuple:
    """The strides torch.empty gives `shape`."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


__all__ = ["signature", "signature_py", "replay_py", "replayed_py", "call", "hit_path", "Plan", "MISS", "MAX_PLANS"]
