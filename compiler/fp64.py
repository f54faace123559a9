"""float64 on a target without fp64 (Kunlun): computed in fp32, as Kunlun's own torch stacks do.

`narrow_fp64(fn)` rewrites a kernel's IR so that no fp64 value is left: every fp64 operation
runs in fp32; an fp64 tensor stays 8-byte IEEE doubles in memory, read and written as two 32-bit
words with integer sequences (no `double` anywhere in the generated code):

- load: round to the nearest fp32, ties to even (fp32 subnormals included, overflow to inf, NaN
  stays a quiet NaN with its sign): numpy's `x.astype(np.float32)`;
- store: the fp32 value widened exactly (fp32 subnormals normalised, NaN payload kept).

Bitcasts of fp64 and fp64 atomics have no fp32 meaning and are refused. The target that uses
this says so at the first launch of each such kernel (docs/kunlun.md, "float64").
"""
from __future__ import annotations

from . import dtypes as D
from .errors import CompilationError
from .ir import Block, Function, Op, TileType
from .ir.ops import BITCAST, LOAD, OPS, STORE
from .passes import replace_all_uses
from .semantic import Builder, Tile

U32 = D.uint32


def uses_fp64(fn: Function) -> bool:
    return any(v.dtype is D.float64 or (v.dtype.is_ptr() and v.dtype.element_ty is D.float64)
               for op in fn.walk() for v in (*op.operands, *op.results))


def narrow_fp64(fn: Function) -> None:
    """See the module docstring. (Kernel parameters are never fp64 scalars: a Python float is fp32.)"""
    _block(fn, fn.body)


def _block(fn: Function, block: Block) -> None:
    for a in block.args:
        _narrow_value(a)
    out: list[Op] = []
    for op in block.ops:
        for sub in op.blocks:
            _block(fn, sub)
        if OPS[op.name].has("atomic") and _elem(op.operands[0]) is D.float64:
            raise CompilationError.at(op.loc, "atomics on float64 are not supported on this target (no fp64: float64 "
                                      "is computed in fp32)", kernel=fn.name)
        if op.name == BITCAST and D.float64 in (op.operands[0].dtype, op.results[0].dtype):
            raise CompilationError.at(op.loc, "a bitcast of float64 has no meaning on this target (no fp64: float64 "
                                      "is computed in fp32)", kernel=fn.name)
        if op.name == LOAD and _elem(op.operands[0]) is D.float64:
            out.extend(_load(fn, op))
        elif op.name == STORE and _elem(op.operands[0]) is D.float64:
            out.extend(_store(op))
        else:
            _retype(op)
            out.append(op)
    block.ops = out


def _elem(ptr):
    return ptr.dtype.element_ty if ptr.dtype.is_ptr() else None


def _narrow_value(v) -> None:
    if v.dtype is D.float64:
        v.type = v.type.with_dtype(D.float32)


def _retype(op: Op) -> None:
    for r in op.results:
        _narrow_value(r)
    for key in ("to", "out_dtype"):
        if op.attrs.get(key) is D.float64:
            op.attrs[key] = D.float32
    t = op.attrs.get("type")
    if isinstance(t, TileType) and t.dtype is D.float64:
        op.attrs["type"] = t.with_dtype(D.float32)
    if "types" in op.attrs:
        op.attrs["types"] = [t.with_dtype(D.float32) if t.dtype is D.float64 else t for t in op.attrs["types"]]


def _words(b: Builder, ptr: Tile):
    """Pointers to the low and the high 32-bit word of each double (little-endian)."""
    p = b.op1("cast", [ptr], {"to": D.pointer_type(U32)})
    return p, b.binary("add", p, 1)


def _load(fn: Function, op: Op) -> list[Op]:
    tmp = Block()
    b = Builder(tmp)
    b.loc = op.loc
    ptr = Tile(op.operands[0])
    lo_p, hi_p = _words(b, ptr)
    mask = Tile(op.operands[1]) if len(op.operands) > 1 else None
    lo, hi = b.load(lo_p, mask, 0), b.load(hi_p, mask, 0)
    x = to_fp32(b, lo, hi)
    if mask is not None:   # `other` is an fp64 value computed in fp32 like the rest
        _narrow_value(op.operands[2])
        x = b.where(mask, x, Tile(op.operands[2]))
    replace_all_uses(fn, op.results[0], x.value)
    return tmp.ops


def _store(op: Op) -> list[Op]:
    tmp = Block()
    b = Builder(tmp)
    b.loc = op.loc
    lo_p, hi_p = _words(b, Tile(op.operands[0]))
    lo, hi = from_fp32(b, Tile(op.operands[1]))
    mask = Tile(op.operands[2]) if len(op.operands) > 2 else None
    b.store(lo_p, lo, mask)
    b.store(hi_p, hi, mask)
    return tmp.ops


def _u(b, x):
    return b.cast(x, U32) if isinstance(x, Tile) else b.to_tile(x, U32)


def to_fp32(b: Builder, lo: Tile, hi: Tile) -> Tile:
    """The fp64 with words (lo, hi) rounded to fp32, ties to even (integer operations only)."""
    bn = b.binary
    sign = bn("and", hi, 0x80000000)
    e = bn("and", bn("shr", hi, 20), 0x7FF)
    m_hi = bn("and", hi, 0xFFFFF)
    # normal fp32 range: the top 23 mantissa bits, rounded on the 29 below
    m23 = bn("or", bn("shl", m_hi, 3), bn("shr", lo, 29))
    rem = bn("and", lo, 0x1FFFFFFF)
    up = bn("or", bn("gt", rem, 0x10000000), bn("and", bn("eq", rem, 0x10000000), bn("eq", bn("and", m23, 1), 1)))
    e32 = bn("sub", e, 896)   # wraps below 0: only read where e > 896
    normal = bn("add", bn("or", bn("shl", e32, 23), m23), b.cast(up, U32))   # a carry may reach inf
    # fp32 subnormals (e <= 896): k = round(M / 2**s), M = 2**52 | m, s = 926 - e >= 30; with q the
    # bits down to two below k's last, made odd when anything further down is set (round to odd),
    # the last two bits of q decide the rounding exactly
    big_m = bn("or", m_hi, 0x100000)
    s = bn("sub", _u(b, 926), e)
    t = bn("sub", s, 2)
    # M >> t from the two words (a shift by an amount outside [0, 32) gives 0: the value rules)
    q = bn("or", bn("or", bn("shl", big_m, bn("sub", _u(b, 32), t)), bn("shr", lo, t)),
           bn("shr", big_m, bn("sub", t, 32)))
    low_hi = bn("ne", bn("shl", big_m, bn("sub", _u(b, 64), t)), 0)   # M's high word below bit t
    below = bn("or", bn("ne", bn("shl", lo, bn("sub", _u(b, 32), t)), 0),
               bn("and", bn("gt", t, 32), bn("or", bn("ne", lo, 0), low_hi)))
    q = bn("or", q, b.cast(below, U32))
    k = bn("shr", q, 2)
    r2 = bn("and", q, 3)
    k = bn("add", k, b.cast(bn("or", bn("eq", r2, 3), bn("and", bn("eq", r2, 2), bn("eq", bn("and", k, 1), 1))), U32))
    sub = b.where(bn("gt", s, 60), _u(b, 0), k)   # far below the smallest subnormal: 0
    bits = b.where(bn("le", e, 896), sub, normal)
    bits = b.where(bn("ge", e, 1151), _u(b, 0x7F800000), bits)   # beyond fp32's range: inf
    nan = bn("or", bn("ne", m_hi, 0), bn("ne", lo, 0))
    special = b.where(nan, _u(b, 0x7FC00000), _u(b, 0x7F800000))
    bits = b.where(bn("eq", e, 0x7FF), special, bits)
    return b.op1("bitcast", [bn("or", bits, sign)], {"to": D.float32})


def from_fp32(b: Builder, x: Tile) -> tuple[Tile, Tile]:
    """The (lo, hi) words of the fp64 equal to fp32 `x` (exact)."""
    bn = b.binary
    x = b.cast(x, D.float32)
    u = b.op1("bitcast", [x], {"to": U32})
    e8 = bn("and", bn("shr", u, 23), 0xFF)
    # an fp32 subnormal times 2**64 is normal, exactly: take its fields, and the exponent back down
    un = b.op1("bitcast", [bn("mul", x, 2.0 ** 64)], {"to": U32})
    sub = bn("eq", e8, 0)
    src = b.where(sub, un, u)
    m23 = bn("and", src, 0x7FFFFF)
    e = bn("and", bn("shr", src, 23), 0xFF)
    e11 = b.where(sub, bn("sub", bn("add", e, 896), 64), bn("add", e, 896))
    e11 = b.where(bn("eq", e8, 0xFF), _u(b, 0x7FF), e11)
    zero = bn("eq", bn("and", u, 0x7FFFFFFF), 0)
    e11 = b.where(zero, _u(b, 0), e11)
    m23 = b.where(zero, _u(b, 0), m23)
    hi = bn("or", bn("or", bn("and", u, 0x80000000), bn("shl", e11, 20)), bn("shr", m23, 3))
    lo = bn("shl", m23, 29)
    return lo, hi
