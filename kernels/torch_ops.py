"""The library ops as torch operators (`torch.library`, namespace `tilejit`).

One call registers an op: `define(name, params, outputs, shapes=..., launch=..., reference=...)`
makes two operators,

- `tilejit::<name>(params) -> outputs`: functional; allocates its outputs (of `shapes`, through
  kernels/outputs.py) and launches (`launch`); its fake (shape-only) implementation allocates the
  same shapes, so torch.compile, torch.export
  and FakeTensorMode see the same shapes, dtypes and strides as a real call;
- `tilejit::<name>_out(params, Tensor(a!) <out>...) -> ()`: writes into caller-given outputs
  (mutation declared, returns nothing; the Python wrapper passes `out` and returns it).

The op body is the only place that reads tilejit's context (the current target, the numerics
policy, whether tuned decisions are used, through `kernels.configs.select`): to dynamo and to
torch.export an op is opaque, so model code calling `kernels.*` traces with `fullgraph=True` and
the context is read when the op runs, every call. Configs travel as a string argument
(`encode_config`), so an explicit `config=` is traceable too.

Gradients: `set_backward(name, setup_context, backward)` gives the functional op its autograd
formula (the backward modules call it). An op without one raises as soon as grad mode needs a
gradient from it (the forward call), never returning a silently detached output; `out=` forms never
record a gradient (the wrappers raise, `require_no_grad`).

float64: no target has fp64 kernels, so an op called with float64 tensors computes them through
its fp64 torch reference (`reference`), on every target. That path exists for
`torch.autograd.gradcheck`; the `kernels.*` wrappers keep refusing float64 inputs.

A tensor without storage (meta, or a FakeTensor outside tracing) never reaches a launch: the op
body refuses it by name (`TilejitError`), before any kernel sees a null pointer.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from compiler.errors import TilejitError
from compiler.launch_record import done, launching_op

from . import op_plans
from .outputs import new_output

NAMESPACE = "tilejit"
_ALIAS = "abcdefghijklmnopqrstuvwxyz"


@dataclasses.dataclass
class LibraryOp:
    """One library op's torch operators and the callables behind them."""

    name: str
    params: tuple[str, ...]          # parameter names, in schema order
    tensor_params: tuple[int, ...]   # indices of the Tensor / Tensor? parameters
    outputs: tuple[str, ...]
    alloc: Callable                  # (*args) -> tuple of fresh outputs (also the fake implementation)
    launch: Callable                 # (*args, *outs) -> None, writes outs
    reference: Callable | None       # (*args) -> tuple of float64 outputs
    op: object = None                # torch.library CustomOpDef of tilejit::<name>
    out_op: object = None            # of tilejit::<name>_out
    has_backward: bool = False
    body: Callable | None = None     # (*args) -> outputs: the functional op's implementation
    out_body: Callable | None = None   # (*args, *outs) -> None: the out form's
    plans: dict = dataclasses.field(default_factory=dict)   # signature -> op_plans.Plan, or None

    def __call__(self, *args):
        """The functional op. In plain eager mode it skips the dispatcher (whose autograd and
        dynamo-disable layers cost ~80 us a call and change nothing there) and, after the first
        call of an argument signature, replays that call's launches (kernels/op_plans.py)."""
        return op_plans.call(self, args)

    def call_out(self, *args) -> None:
        """The out form (inputs, then outputs). In plain eager mode (plain_eager) it skips the dispatcher too
        (~90 us a call of a silu_and_mul that takes 10), bumping the outputs' version counters as
        its in-place layer would, so autograd still refuses a saved tensor this overwrote."""
        if torch.compiler.is_compiling() or not plain_eager(args):
            self.out_op(*args)
            return
        self.out_body(*args)
        for t in args[len(self.params):]:
            torch.autograd.graph.increment_version(t)

    def __post_init__(self):
        # the outputs when a launch plan for `args` replayed, else op_plans.MISS (see there)
        self.replayed = op_plans.hit_path(self.plans)

    def run(self, args, outs) -> None:
        """The op body: refuses tensors without storage, then the fp64 reference or the launch."""
        _run(self, tuple(args), tuple(outs))

    @property
    def functional(self):
        return getattr(torch.ops.tilejit, self.name).default

    @property
    def out(self):
        return getattr(torch.ops.tilejit, self.name + "_out").default


_OPS: dict[str, LibraryOp] = {}


def registered() -> dict[str, LibraryOp]:
    """name -> LibraryOp of every op registered so far."""
    return dict(_OPS)


def library_op(name: str) -> LibraryOp:
    try:
        return _OPS[name]
    except KeyError:
        raise TilejitError(f"no torch operator tilejit::{name}; registered: {', '.join(sorted(_OPS))}") from None


def _param_names(params: str) -> tuple[list[str], list[int]]:
    names, tensors = [], []
    for i, p in enumerate(x.strip() for x in params.split(",")):
        typ, _, name = p.rpartition(" ")
        names.append(name.split("=")[0])
        if typ.startswith("Tensor"):
            tensors.append(i)
    return names, tensors


def define(name: str, params: str, outputs: tuple[str, ...], *, shapes: Callable, launch: Callable,
           reference: Callable | None = None) -> LibraryOp:
    """Registers tilejit::<name> and tilejit::<name>_out (see the module docstring).

    params    the schema of the inputs: "Tensor x, Tensor? weight, float eps, str? config"
    outputs   names of the outputs ("y",) or ("y", "residual"); the out form takes them, in order,
              after the inputs
    shapes    (*inputs) -> ((shape, dtype), ...) of the outputs, raising on inputs the op refuses
              (shapes, dtypes: metadata only, so it is also the fake implementation's check);
              outputs are allocated contiguous on the first tensor input's device
    launch    (*inputs, *outputs) -> None: checks the device and launches the kernels into outputs
    reference (*inputs) -> tuple of float64 outputs, used when the inputs are float64 (or None)
    """
    if name in _OPS:
        raise TilejitError(f"torch operator tilejit::{name} is defined twice")
    names, tensors = _param_names(params)
    n_in = len(names)

    def alloc(*args, empty=new_output):
        dev = next(args[i] for i in tensors if args[i] is not None).device
        return tuple(empty(s, dtype=dt, device=dev) for s, dt in shapes(*args))

    lop = LibraryOp(name, tuple(names), tuple(tensors), tuple(outputs), alloc, launch, reference)
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"

    def functional(*args):
        outs = alloc(*args)
        _run(lop, args, outs)
        return outs[0] if len(outs) == 1 else outs

    lop.body = functional

    def fake(*args):
        outs = alloc(*args, empty=torch.empty)   # metadata only: no pages to advise
        return outs[0] if len(outs) == 1 else outs

    def out_form(*args):
        _check_outs(name, outputs, shapes(*args[:n_in]), args[n_in:])
        _run(lop, args[:n_in], args[n_in:])

    lop.out_body = out_form
    lop.op = torch.library.custom_op(f"{NAMESPACE}::{name}", functional, mutates_args=(),
                                     schema=f"({params}) -> {returns}")
    lop.op.register_fake(fake)
    out_params = ", ".join(f"Tensor({_ALIAS[i]}!) {o}" for i, o in enumerate(outputs))
    lop.out_op = torch.library.custom_op(f"{NAMESPACE}::{name}_out", out_form, mutates_args=tuple(outputs),
                                         schema=f"({params}, {out_params}) -> ()")
    lop.out_op.register_fake(lambda *args: _check_outs(name, outputs, shapes(*args[:n_in]), args[n_in:]))
    lop.op.register_autograd(_no_backward(name), setup_context=_no_gradient_setup(name))
    _OPS[name] = lop
    return lop


def _check_outs(op: str, names, expected, outs) -> None:
    for n, (shape, dtype), t in zip(names, expected, outs):
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: {n} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        if t.dtype != dtype:
            raise TypeError(f"{op}: argument '{n}' has dtype {str(t.dtype).replace('torch.', '')}, expected "
                            f"{str(dtype).replace('torch.', '')}")


def set_backward(name: str, setup_context: Callable, backward: Callable) -> None:
    """The autograd formula of tilejit::<name> (torch.library's register_autograd contract:
    setup_context(ctx, inputs, output), backward(ctx, *grads) -> one gradient per input)."""
    lop = library_op(name)
    lop.op.register_autograd(backward, setup_context=setup_context)
    lop.has_backward = True


def _no_gradient_setup(name: str):
    def setup_context(ctx, inputs, output):
        raise TilejitError(f"tilejit::{name} has no gradient: an input requires grad while grad mode is on. "
                           f"Call it under torch.no_grad() (inference), or detach its inputs.")
    return setup_context


def _no_backward(name: str):
    def backward(ctx, *grads):
        raise TilejitError(f"tilejit::{name} has no gradient")
    return backward


def no_gradient_for(ctx, op: str, names: dict[int, str]) -> None:
    """In a setup_context: TilejitError if autograd needs the gradient of an input the op does not
    differentiate (`names`: input index -> name), instead of returning a silent zero for it."""
    for i, n in names.items():
        if ctx.needs_input_grad[i]:
            raise TilejitError(f"tilejit::{op}: no gradient with respect to '{n}' (it requires grad); "
                               f"detach it, or compute it under torch.no_grad()")


def require_no_grad(op: str, *tensors) -> None:
    """The out= forms write into a caller's tensor and record no gradient: refuse them when grad mode
    would need one (traceable: only tensor metadata and the grad mode are read)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise TilejitError(f"{op}: out= records no gradient, but an input requires grad; call {op} without "
                           f"out= (its result then has a gradient), or under torch.no_grad()")


# ---------------------------------------------------------------------------------------------
# running an op body
# ---------------------------------------------------------------------------------------------
def plain_eager(args) -> bool:
    """Whether nothing would see the operator: no torch.compile/export or jit tracing, no dispatch
    or function mode (FakeTensorMode, FlopCounterMode, ...), no functorch transform (vmap, grad),
    plain tensors with storage only (a meta tensor gets the fake implementation), and no gradient
    to record. Anything else goes through the operator."""
    return op_plans.signature(args) is not None


def _no_storage(t: torch.Tensor) -> bool:
    return t.is_meta or isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def require_storage(op: str, named: dict) -> None:
    """TilejitError naming the first tensor that has no storage (meta, fake): a launch would hand
    a kernel a null pointer."""
    for n, t in named.items():
        if isinstance(t, torch.Tensor) and _no_storage(t):
            kind = "a meta tensor" if t.is_meta else "a FakeTensor"
            raise TilejitError(
                f"{op}: argument '{n}' is {kind} (it has no storage), and a kernel cannot run on it. "
                f"Shape-only tracing (FakeTensorMode, meta tensors, torch.compile/export) goes through the "
                f"op's fake implementation: call the op (kernels.* or torch.ops.tilejit.*), not its kernel, "
                f"or pass real tensors")


def _run(lop: LibraryOp, args, outs) -> None:
    named = {lop.params[i]: args[i] for i in lop.tensor_params}
    named.update(zip(lop.outputs, outs))
    require_storage(f"tilejit::{lop.name}", named)
    if any(t is not None and t.dtype == torch.float64 for t in named.values()):
        if lop.reference is None:
            raise TilejitError(f"tilejit::{lop.name}: float64 inputs are not supported (no fp64 reference)")
        for o, r in zip(outs, lop.reference(*args)):
            o.copy_(r)
        return
    token = launching_op(lop.name)   # a kernel built now records its op (compiler.launch_record)
    try:
        lop.launch(*args, *outs)
    finally:
        done(token)


# ---------------------------------------------------------------------------------------------
# configs as op arguments
# ---------------------------------------------------------------------------------------------
def encode_config(config: dict | None) -> str | None:
    """An explicit config as the op's `str? config` argument ("BLOCK_M=16,BLOCK_N=32")."""
    if not config:
        return None
    return ",".join(f"{k}={int(v)}" for k, v in sorted(config.items()))


def decode_config(text: str | None) -> dict | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        out[k] = int(v)
    return out


__all__ = ["define", "set_backward", "plain_eager", "registered", "library_op", "LibraryOp", "no_gradient_for", "require_no_grad",
           "require_storage", "encode_config", "decode_config", "NAMESPACE"]
