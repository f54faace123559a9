"""The op registry: every IR op is declared once here, with its kind, operand count, type rule
and traits. Every other list of ops (the semantic layer's, the strict rewrite's, the renderers')
is derived from this table through `ops_with(trait)` and `OPS[name].kind`.

Kinds drive generic code in passes and renderers:
- "elementwise": result element i depends on operand elements i (same shape everywhere);
- "view": re-indexes its operands without computing (broadcast, expand_dims, trans, reshape;
  join stacks two operands along a new last axis, split takes the two halves of a last axis of 2);
- "source": makes a value from attributes only (const, arange, program_id, num_programs);
- "memory": load / store, atomics (atomic_rmw, atomic_cas: read-modify-write of global memory,
  returning the old values), barrier (orders a program's memory accesses); "reduce" (reduce,
  argreduce); "scan" (prefix sums along an axis, in order); "dot"; "debug": print / assert;
  "control": for / while / if / yield.
Structured control flow: `for` (bounds, then carried initial values; one body block whose args are
the induction variable and the carried values), `while` (carried initial values; a condition block
and a body block, both taking the carried values; the condition block yields one int1 scalar, the
body yields the next carried values), `if` (an int1 scalar; a then and an else block, each yielding
the op's results, whose types are the attribute `types`).
Traits:
- "arith": arithmetic (bool operands are computed as int32);  "compare": gives int1;
- "bitwise": integer operands only;  "float_only": floating-point operands only;
- "math": a `tl.<name>` unary math builtin of the same name;
- "int_only": integer operands only (umulhi);
- "rounds": an fp16/bf16 result is computed in fp32 and rounded once to the narrow format;
- "ring": add, sub, mul, neg: one cheap instruction, exact modulo 2**bits on integers (an affine
  index stays affine);  "division": div, floordiv, mod (tens of cycles on integers);
- "keeps_origin": a result computed from a pointer operand points into that operand's buffer;
- "axis_view": a view mapping each result axis to at most one operand axis (no reshaping);
- "same_elements": a view that neither repeats nor drops an element;
- "uniform": a source with one value at every index;  "grid_index": reads the launch grid;
- "writes_global": writes global memory;  "atomic": a read-modify-write of global memory;
- "effect": does something besides computing its results (writes memory, orders accesses,
  prints, traps);
- "has_region": owns blocks (structured control flow);  "loop": runs its body repeatedly;
- "combines": combines many elements of a tile in some order (a vector width may change the
  rounding of its result);
- "whole_result": its results are computed as a whole by the op, never element by element where
  they are used (an element depends on others or on control flow, or the op has effects);
- "strict_sequence": has a bitwise-reproducible fp32 sequence of simpler ops (compiler/strict.py);
  "unreproducible": has none, so the strict numerics policy refuses it.
Renderers must cover or explicitly reject every op (a test checks this table against them).

Each op's name is also a constant of this module (`LOAD = "load"`): package code compares
`op.name == LOAD`, so a misspelt name fails when its module is imported instead of never matching
(tests/test_op_names.py keeps string literals out of those comparisons).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import dtypes as D
from .core import TileType


class TypeRuleError(Exception):
    """Raised by a type rule; the frontend turns it into a CompilationError at the user's line."""


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    rule: Callable[[list, dict], list]
    arity: tuple[int, int | None]          # (fewest, most) operands; None: any number
    pure: bool = True
    commutative: bool = False
    traits: frozenset = frozenset()

    def has(self, trait: str) -> bool:
        if trait not in TRAITS:   # a misspelt trait would otherwise never match
            raise KeyError(f"unknown op trait {trait!r}")
        return trait in self.traits


OPS: dict[str, OpDef] = {}
TRAITS: set[str] = set()   # every trait some op declares


def ops_with(trait: str) -> frozenset[str]:
    """Names of the ops that have `trait`."""
    if trait not in TRAITS:
        raise KeyError(f"unknown op trait {trait!r}")
    return frozenset(n for n, d in OPS.items() if trait in d.traits)


def infer(name: str, operand_types: list[TileType], attrs: dict) -> list[TileType]:
    """The result types of op `name`; raises TypeRuleError when the operands do not fit."""
    d = OPS.get(name)
    if d is None:
        raise TypeRuleError(f"unknown op {name!r}")
    lo, hi = d.arity
    if len(operand_types) < lo or (hi is not None and len(operand_types) > hi):
        want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
        raise TypeRuleError(f"'{name}' takes {want} operands, got {len(operand_types)}")
    return d.rule(operand_types, attrs)


def _same_shape(*types: TileType) -> None:
    shapes = {t.shape for t in types}
    if len(shapes) > 1:
        raise TypeRuleError("operand shapes differ: " + ", ".join(str(t) for t in types))


def _binary(ts, attrs, name):
    a, b = ts
    _same_shape(a, b)
    if OPS[name].has("compare"):
        if a.dtype is not b.dtype:
            raise TypeRuleError(f"comparison of {a.dtype} with {b.dtype}")
        return [a.with_dtype(D.int1)]
    if name == "add" and (a.dtype.is_ptr() or b.dtype.is_ptr()):
        p, i = (a, b) if a.dtype.is_ptr() else (b, a)
        if not i.dtype.is_int() or i.dtype.is_ptr():
            raise TypeRuleError(f"pointer + {i.dtype}: offsets must be integers")
        return [i.with_dtype(p.dtype)]
    if name == "sub" and a.dtype.is_ptr() and b.dtype.is_int() and not b.dtype.is_ptr():
        return [a]
    if a.dtype is not b.dtype:
        raise TypeRuleError(f"'{name}' of {a.dtype} with {b.dtype} (operands must be cast first)")
    if a.dtype.is_ptr():
        raise TypeRuleError(f"'{name}' is not defined on pointers")
    if OPS[name].has("bitwise") and not a.dtype.is_int():
        raise TypeRuleError(f"bitwise '{name}' needs integer operands, got {a.dtype}")
    if name == "div" and not a.dtype.is_floating():
        raise TypeRuleError("'/' on integers must be lowered to a float division first")
    if name == "floordiv" and not a.dtype.is_int():
        raise TypeRuleError("'//' is defined on integers only")
    if OPS[name].has("float_only") and not a.dtype.is_floating():
        raise TypeRuleError(f"'{name}' needs floating-point operands, got {a.dtype}")
    if OPS[name].has("int_only") and (not a.dtype.is_int() or a.dtype.is_bool() or a.dtype.bits != 32):
        raise TypeRuleError(f"'{name}' needs 32-bit integer operands, got {a.dtype}")
    return [a]


def _unary(ts, attrs, name):
    (a,) = ts
    if a.dtype.is_ptr():
        raise TypeRuleError(f"'{name}' is not defined on pointers")
    if OPS[name].has("float_only") and not a.dtype.is_floating():
        raise TypeRuleError(f"'{name}' needs a floating-point operand, got {a.dtype}")
    return [a]


def _const(ts, attrs):
    return [attrs["type"]]


def _arange(ts, attrs):
    return [TileType(D.int32, (attrs["end"] - attrs["start"],))]


def _pid(ts, attrs):
    return [TileType(D.int32)]


def _cast(ts, attrs):
    (a,) = ts
    to = attrs["to"]
    if a.dtype.is_ptr() != to.is_ptr() and (a.dtype if to.is_ptr() else to) not in (D.int64, D.uint64):
        raise TypeRuleError(f"cannot cast {a.dtype} to {to} (pointers convert to and from 64-bit integers)")
    return [a.with_dtype(to)]


def _bitcast(ts, attrs):
    (a,) = ts
    to = attrs["to"]
    if a.dtype.is_ptr() or to.is_ptr() or a.dtype.bits != to.bits:
        raise TypeRuleError(f"bitcast needs types of one width, got {a.dtype} -> {to}")
    return [a.with_dtype(to)]


def _where(ts, attrs):
    c, a, b = ts
    _same_shape(c, a, b)
    if c.dtype is not D.int1:
        raise TypeRuleError(f"where's condition must be int1, got {c.dtype}")
    if a.dtype is not b.dtype:
        raise TypeRuleError(f"where's branches differ: {a.dtype} vs {b.dtype}")
    return [a]


def _fma(ts, attrs):
    _same_shape(*ts)
    if len({t.dtype for t in ts}) != 1 or not ts[0].dtype.is_floating():
        raise TypeRuleError("fma needs three floating operands of one dtype")
    return [ts[0]]


def _broadcast(ts, attrs):
    (a,) = ts
    shape = tuple(attrs["shape"])
    if a.shape and (len(a.shape) != len(shape) or any(s not in (1, t) for s, t in zip(a.shape, shape))):
        raise TypeRuleError(f"cannot broadcast {a} to shape {list(shape)}")
    return [a.with_shape(shape)]


def _expand_dims(ts, attrs):
    (a,) = ts
    ax = attrs["axis"]
    if not 0 <= ax <= len(a.shape):
        raise TypeRuleError(f"expand_dims axis {ax} out of range for {a}")
    return [a.with_shape(a.shape[:ax] + (1,) + a.shape[ax:])]


def _trans(ts, attrs):
    (a,) = ts
    perm = attrs["perm"]
    if sorted(perm) != list(range(len(a.shape))):
        raise TypeRuleError(f"bad permutation {perm} for {a}")
    return [a.with_shape(tuple(a.shape[p] for p in perm))]


def _load(ts, attrs):
    p = ts[0]
    if not p.dtype.is_ptr():
        raise TypeRuleError(f"load needs a pointer, got {p.dtype}")
    if len(ts) > 1:
        _same_shape(p, ts[1])
        if ts[1].dtype is not D.int1:
            raise TypeRuleError(f"load mask must be int1, got {ts[1].dtype}")
    if len(ts) > 2:
        _same_shape(p, ts[2])
        if ts[2].dtype is not p.dtype.element_ty:
            raise TypeRuleError(f"load 'other' must be {p.dtype.element_ty}, got {ts[2].dtype}")
    return [p.with_dtype(p.dtype.element_ty)]


def _store(ts, attrs):
    p, v = ts[0], ts[1]
    if not p.dtype.is_ptr():
        raise TypeRuleError(f"store needs a pointer, got {p.dtype}")
    _same_shape(p, v)
    if v.dtype is not p.dtype.element_ty:
        raise TypeRuleError(f"store of {v.dtype} through {p.dtype}")
    if len(ts) > 2:
        _same_shape(p, ts[2])
    return []


def _reduce(ts, attrs):
    (a,) = ts
    ax = attrs["axis"]
    if attrs.get("order", "sequential") not in ("sequential", "pairwise"):
        raise TypeRuleError(f"unknown reduction order {attrs['order']}")
    if attrs["kind"] not in REDUCE_KINDS:
        raise TypeRuleError(f"unknown reduction {attrs['kind']}")
    if not 0 <= ax < len(a.shape):
        raise TypeRuleError(f"reduction axis {ax} out of range for {a}")
    out = attrs.get("out_dtype") or a.dtype
    return [TileType(out, a.shape[:ax] + a.shape[ax + 1:])]


def _dot(ts, attrs):
    a, b, c = ts
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise TypeRuleError(f"dot needs 2-D tiles, got {a} and {b}")
    if a.shape[1] != b.shape[0]:
        raise TypeRuleError(f"dot inner dimensions differ: {a} @ {b}")
    if c.shape != (a.shape[0], b.shape[1]):
        raise TypeRuleError(f"dot accumulator {c} does not match {a} @ {b}")
    if a.dtype is not b.dtype:
        raise TypeRuleError(f"dot operands differ in dtype: {a.dtype} vs {b.dtype}")
    return [c]


def _reshape(ts, attrs):
    (a,) = ts
    shape = tuple(attrs["shape"])
    n = 1
    for d in shape:
        n *= d
    if n != a.numel:   # () takes the element of a single-element tile
        raise TypeRuleError(f"cannot reshape {a} ({a.numel} elements) to shape {list(shape)}")
    return [a.with_shape(shape)]


def _join(ts, attrs):
    a, b = ts
    if a != b:
        raise TypeRuleError(f"join needs two operands of one type, got {a} and {b}")
    return [a.with_shape(a.shape + (2,))]


def _split(ts, attrs):
    (a,) = ts
    if not a.shape or a.shape[-1] != 2:
        raise TypeRuleError(f"split needs a last axis of size 2, got {a}")
    return [a.with_shape(a.shape[:-1])] * 2


def _scan(ts, attrs):
    (a,) = ts
    if attrs["kind"] not in ("sum",) or not 0 <= attrs["axis"] < len(a.shape):
        raise TypeRuleError(f"bad scan {attrs} of {a}")
    return [a]


def _argreduce(ts, attrs):
    (a,) = ts
    ax = attrs["axis"]
    if attrs["kind"] not in ("max", "min") or not 0 <= ax < len(a.shape) or a.dtype.is_ptr():
        raise TypeRuleError(f"bad argreduce {attrs} of {a}")
    shape = a.shape[:ax] + a.shape[ax + 1:]
    return [TileType(a.dtype, shape), TileType(D.int32, shape)]


ATOMIC_KINDS = ("add", "max", "min", "xchg", "and", "or", "xor")


def _atomic_rmw(ts, attrs):
    p, v = ts[0], ts[1]
    if not p.dtype.is_ptr() or attrs["kind"] not in ATOMIC_KINDS:
        raise TypeRuleError(f"atomic_{attrs['kind']} needs a pointer, got {p.dtype}")
    _same_shape(*ts)
    if v.dtype is not p.dtype.element_ty or (len(ts) > 2 and ts[2].dtype is not D.int1):
        raise TypeRuleError(f"atomic_{attrs['kind']} of {v.dtype} through {p.dtype}")
    return [v]


def _atomic_cas(ts, attrs):
    p, c, v = ts
    _same_shape(*ts)
    if not p.dtype.is_ptr() or c.dtype is not p.dtype.element_ty or v.dtype is not c.dtype:
        raise TypeRuleError(f"atomic_cas of {c.dtype}, {v.dtype} through {p.dtype}")
    return [v]


def _nothing(ts, attrs):
    return []


def _assert(ts, attrs):
    if ts[0].dtype is not D.int1:
        raise TypeRuleError(f"device_assert needs an int1 condition, got {ts[0]}")
    return []


def _for(ts, attrs):
    return list(ts[3:])


def _while(ts, attrs):
    return list(ts)


def _if(ts, attrs):
    (c,) = ts
    if c.dtype is not D.int1 or not c.is_scalar:
        raise TypeRuleError(f"an 'if' condition must be an int1 scalar, got {c}")
    return list(attrs.get("types", ()))


def _yield(ts, attrs):
    return []


def _def(name, kind, rule, arity, *traits, pure=True, commutative=False):
    OPS[name] = OpDef(name, kind, rule, arity if isinstance(arity, tuple) else (arity, arity), pure, commutative,
                      frozenset(traits))
    TRAITS.update(traits)


def _bin(name):
    return lambda ts, at: _binary(ts, at, name)


def _un(name):
    return lambda ts, at: _unary(ts, at, name)


_def("const", "source", _const, 0, "uniform")
_def("arange", "source", _arange, 0)
for _n in ("program_id", "num_programs"):
    _def(_n, "source", _pid, 0, "uniform", "grid_index")
for _n, _traits in (("add", ("arith", "rounds", "ring", "keeps_origin")),
                    ("mul", ("arith", "rounds", "ring")), ("max", ()), ("min", ()),
                    ("and", ("bitwise",)), ("or", ("bitwise",)), ("xor", ("bitwise",)),
                    ("eq", ("compare",)), ("ne", ("compare",))):
    _def(_n, "elementwise", _bin(_n), 2, *_traits, commutative=True)
for _n, _traits in (("sub", ("arith", "rounds", "ring", "keeps_origin")),
                    ("div", ("arith", "rounds", "division")),
                    ("floordiv", ("arith", "division")), ("mod", ("arith", "rounds", "division")),
                    ("shl", ("bitwise",)), ("shr", ("bitwise",)),
                    ("lt", ("compare",)), ("le", ("compare",)), ("gt", ("compare",)), ("ge", ("compare",))):
    _def(_n, "elementwise", _bin(_n), 2, *_traits)
_def("neg", "elementwise", _un("neg"), 1, "ring")
_def("not", "elementwise", _un("not"), 1)
_def("abs", "elementwise", _un("abs"), 1, "math")
# the strict policy's view of each: a reproducible sequence, refused, or correctly rounded (sqrt)
for _n, _strict in (("exp", "strict_sequence"), ("exp2", "strict_sequence"), ("log", "strict_sequence"),
                    ("log2", "strict_sequence"), ("sqrt", None), ("rsqrt", "strict_sequence"),
                    ("sigmoid", "strict_sequence"), ("sin", "unreproducible"), ("cos", "unreproducible"),
                    ("tanh", "strict_sequence"), ("erf", "strict_sequence"), ("log1p", "strict_sequence"),
                    ("expm1", "strict_sequence")):
    _def(_n, "elementwise", _un(_n), 1, "math", "float_only", "rounds", *filter(None, [_strict]))
for _n in ("floor", "ceil", "trunc", "rint"):   # exact in every format: no rounding
    _def(_n, "elementwise", _un(_n), 1, "math", "float_only", *(["strict_sequence"] if _n == "rint" else []))
_def("pow", "elementwise", _bin("pow"), 2, "float_only", "rounds", "strict_sequence")
_def("umulhi", "elementwise", _bin("umulhi"), 2, "int_only", commutative=True)
_def("cast", "elementwise", _cast, 1, "keeps_origin")
_def("bitcast", "elementwise", _bitcast, 1)
_def("where", "elementwise", _where, 3)
_def("fma", "elementwise", _fma, 3, "rounds")
_def("broadcast", "view", _broadcast, 1, "axis_view")
_def("expand_dims", "view", _expand_dims, 1, "axis_view", "same_elements")
_def("trans", "view", _trans, 1, "axis_view", "same_elements")
_def("reshape", "view", _reshape, 1, "same_elements")
_def("join", "view", _join, 2)
_def("split", "view", _split, 1)
_def("load", "memory", _load, (1, 3), pure=False)   # not pure: must stay ordered with stores
_def("store", "memory", _store, (2, 3), "writes_global", "effect", pure=False)
_def("atomic_rmw", "memory", _atomic_rmw, (2, 3), "writes_global", "atomic", "effect", "whole_result",
     pure=False)
_def("atomic_cas", "memory", _atomic_cas, 3, "writes_global", "atomic", "effect", "whole_result", pure=False)
_def("barrier", "memory", _nothing, 0, "effect", pure=False)
_def("reduce", "reduce", _reduce, 1, "combines", "whole_result")
_def("argreduce", "reduce", _argreduce, 1, "combines", "whole_result")
_def("scan", "scan", _scan, 1, "combines", "whole_result")
_def("print", "debug", _nothing, (0, None), "effect", pure=False)
_def("assert", "debug", _assert, 1, "effect", pure=False)
_def("dot", "dot", _dot, 3, "combines", "whole_result")
_def("for", "control", _for, (3, None), "has_region", "loop", "whole_result", pure=False)
_def("while", "control", _while, (0, None), "has_region", "loop", "whole_result", pure=False)
_def("if", "control", _if, 1, "has_region", "whole_result", pure=False)
_def("yield", "control", _yield, (0, None), pure=False)

# the op-name constants (see the module docstring)
globals().update({_n.upper(): _n for _n in OPS})

ARITH = ops_with("arith")
BITWISE = ops_with("bitwise")
COMPARE = ops_with("compare")
FLOAT_ONLY = ops_with("float_only")
MATH = ops_with("math")
ROUNDS = ops_with("rounds")
REDUCE_KINDS = ("sum", "max", "min")
