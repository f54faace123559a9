"""Typed construction of Tile IR ops, with Triton's implicit rules: Python scalars become
constants of a fitting dtype, operands are promoted and broadcast, `/` on integers divides in
fp32. The frontend calls these; every user mistake surfaces as a `SemanticError`, which the
frontend turns into a CompilationError at the user's line."""
from __future__ import annotations

import builtins
import math

from . import dtypes as D
from .ir import Block, Loc, Op, TileType, TypeRuleError, Value, infer
from .ir.ops import ARITH, BITWISE, COMPARE, FLOAT_ONLY


class SemanticError(Exception):
    pass


class Tile:
    """A frontend handle on an IR value: what a name in a kernel body refers to at compile time."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    @property
    def dtype(self) -> D.dtype:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def type(self) -> TileType:
        return self.value.type

    def __repr__(self) -> str:
        return f"Tile({self.value.type})"

    def __bool__(self):
        raise SemanticError("a tensor value has no truth value at compile time: use tl.where for values, "
                            "or make the condition a tl.constexpr")


INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def scalar_dtype_of(x) -> D.dtype:
    if isinstance(x, bool):
        return D.int1
    if isinstance(x, int):
        return D.int32 if INT32_MIN <= x <= INT32_MAX else D.int64
    if isinstance(x, float):
        return D.float32
    raise SemanticError(f"cannot use {type(x).__name__} value {x!r} as a tensor")


# Tiles are indexed with 32-bit ints (the C lowering's `int`, Triton's int32 tl.arange): a tile of
# 2**31 elements or more would wrap its index and silently do nothing.
MAX_TILE_ELEMENTS = 2 ** 31 - 1


class Builder:
    """Appends ops to the current block; `loc` is set by the frontend before each statement."""

    def __init__(self, block: Block):
        self.block = block
        self.loc: Loc | None = None

    # -- raw op creation ------------------------------------------------------------------
    def op(self, name: str, operands: list[Tile], attrs: dict | None = None,
           blocks: list[Block] | None = None) -> list[Tile]:
        vals = [t.value for t in operands]
        try:
            types = infer(name, [v.type for v in vals], attrs or {})
        except TypeRuleError as e:
            raise SemanticError(str(e)) from None
        for t in types:
            if t.numel > MAX_TILE_ELEMENTS:
                raise SemanticError(f"a tile of shape {list(t.shape)} has {t.numel} elements, more than any target "
                                    f"can index (at most 2**31 - 1 = {MAX_TILE_ELEMENTS}); use smaller BLOCK sizes")
        op = Op(name, vals, types, attrs, blocks, self.loc)
        self.block.append(op)
        return [Tile(r) for r in op.results]

    def op1(self, name, operands, attrs=None) -> Tile:
        return self.op(name, operands, attrs)[0]

    # -- constants --------------------------------------------------------------------------
    def const(self, value, dt: D.dtype, shape=()) -> Tile:
        if dt in D.FP8:   # a storage type: its bits, reinterpreted
            from .fp8 import const_bits  # noqa: PLC0415
            return self.op1("bitcast", [self.const(const_bits(value, dt), D.int8, shape)], {"to": dt})
        if dt.is_floating():
            value = float(value)
        elif dt.is_bool():
            value = bool(value)
        elif dt.is_int():
            value = int(value)
            lo, hi = dt.int_range()
            if not lo <= value <= hi:
                raise SemanticError(f"constant {value} does not fit in {dt}")
        return self.op1("const", [], {"value": value, "type": TileType(dt, tuple(shape))})

    def to_tile(self, x, like: D.dtype | None = None) -> Tile:
        """Python scalar -> constant tile, typed after `like` where Triton's rules say so."""
        if isinstance(x, Tile):
            return x
        if isinstance(x, D.dtype) or x is None:
            raise SemanticError(f"cannot use {x!r} as a tensor value")
        dt = scalar_dtype_of(x)
        if like is not None and not like.is_ptr():
            if like.is_floating() and not isinstance(x, bool):
                dt = like
            elif like.is_int() and not like.is_bool() and isinstance(x, int) and not isinstance(x, bool):
                lo, hi = like.int_range()
                dt = like if lo <= x <= hi else scalar_dtype_of(x) if like.is_unsigned() else D.int64
            elif like.is_bool() and isinstance(x, bool):
                dt = D.int1
        return self.const(x, dt)

    # -- shapes -----------------------------------------------------------------------------
    def broadcast_to(self, t: Tile, shape) -> Tile:
        shape = tuple(shape)
        if t.shape == shape:
            return t
        if len(t.shape) > len(shape):
            raise SemanticError(f"cannot broadcast {t.type} to shape {list(shape)}")
        while len(t.shape) < len(shape) and t.shape:
            t = self.expand_dims(t, 0)
        return self.op1("broadcast", [t], {"shape": shape})

    def expand_dims(self, t: Tile, axis: int) -> Tile:
        if axis < 0:
            axis += len(t.shape) + 1
        return self.op1("expand_dims", [t], {"axis": axis})

    @staticmethod
    def broadcast_shape(*shapes) -> tuple[int, ...]:
        rank = builtins.max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
            dims.discard(1)
            if len(dims) > 1:
                raise SemanticError("incompatible shapes for broadcasting: "
                                    + ", ".join(str(list(s)) for s in shapes))
            out.append(dims.pop() if dims else 1)
        return tuple(out)

    def broadcast_all(self, *tiles: Tile) -> list[Tile]:
        shape = self.broadcast_shape(*(t.shape for t in tiles))
        return [self.broadcast_to(t, shape) for t in tiles]

    # -- casts and promotion ------------------------------------------------------------------
    def cast(self, t: Tile, to: D.dtype) -> Tile:
        t = self.to_tile(t)
        if t.dtype is to:
            return t
        if t.dtype in D.FP8 or to in D.FP8:
            from .fp8 import convert  # noqa: PLC0415
            return convert(self, t, to)
        if t.dtype.is_ptr() != to.is_ptr() and (t.dtype if to.is_ptr() else to) not in (D.int64, D.uint64):
            raise SemanticError(f"cannot cast {t.dtype} to {to}: a pointer is made from a 64-bit integer "
                                "(x.to(tl.int64).to(tl.pointer_type(...))) and read as one (ptr.to(tl.int64))")
        return self.op1("cast", [t], {"to": to})

    def bitcast(self, t: Tile, to: D.dtype) -> Tile:
        t = self.to_tile(t)
        if t.dtype is to:
            return t
        if t.dtype.is_ptr() or to.is_ptr():
            if t.dtype.is_ptr() and to.is_ptr():
                return self.op1("cast", [t], {"to": to})
            raise SemanticError(f"cannot bitcast between {t.dtype} and {to}")
        if t.dtype.bits != to.bits or t.dtype.is_bool() or to.is_bool():
            raise SemanticError(f"bitcast needs dtypes of one width, got {t.dtype} ({t.dtype.bits} bits) and "
                                f"{to} ({to.bits} bits)")
        return self.op1("bitcast", [t], {"to": to})

    @staticmethod
    def compute_dtype(dt: D.dtype) -> D.dtype:
        """fp8 values compute in fp32 (they are storage types)."""
        return D.float32 if dt in D.FP8 else dt

    def _promote_pair(self, a, b):
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            a = self.to_tile(a)
        if not isinstance(a, Tile):
            a = self.to_tile(a, b.dtype)
        if not isinstance(b, Tile):
            b = self.to_tile(b, a.dtype)
        return a, b

    # -- arithmetic ---------------------------------------------------------------------------
    def binary(self, name: str, a, b) -> Tile:
        a, b = self._promote_pair(a, b)
        a, b = self.broadcast_all(a, b)
        if name == "shr" and a.dtype.is_int() and b.dtype.is_int():
            return self._shr(a, b)
        if a.dtype.is_ptr() or b.dtype.is_ptr():
            if name not in ("add", "sub") or (b.dtype.is_ptr() and name == "sub"):
                if name in COMPARE and a.dtype is b.dtype:
                    return self.op1(name, [a, b])
                raise SemanticError(f"'{name}' is not defined between {a.dtype} and {b.dtype}")
            if name == "sub":
                return self.op1("add", [a, self.op1("neg", [b])])
            return self.op1("add", [a, b])
        dt = self.compute_dtype(D.promote(a.dtype, b.dtype))
        if name == "div" and not dt.is_floating():
            dt = D.float32
        if name == "floordiv" and dt.is_floating():
            raise SemanticError("'//' is defined on integers only; use tl.floor(a / b) for floats")
        if name in BITWISE and not dt.is_int():
            raise SemanticError(f"bitwise operator needs integer operands, got {a.dtype} and {b.dtype}")
        if name in ARITH and dt.is_bool():
            return self._int1_arith(name, a, b)
        return self.op1(name, [self.cast(a, dt), self.cast(b, dt)])

    def _shr(self, a: Tile, b: Tile) -> Tile:
        """`a >> b`: arithmetic when a's own type is signed, logical otherwise, on the promoted type's
        bits, as Triton's (an int8 >> uint8 shifts the sign in, then reads as uint8)."""
        dt = D.promote(a.dtype, b.dtype)
        arithmetic = a.dtype.kind == "i"
        a, b = self.cast(a, dt), self.cast(b, dt)
        if dt.is_bool() or arithmetic == (dt.kind == "i"):
            return self.op1("shr", [a, b])
        other = D.from_name(("int" if arithmetic else "uint") + str(dt.bits))
        r = self.op1("shr", [self.bitcast(a, other), self.bitcast(b, other)])
        return self.bitcast(r, dt)

    def _int1_arith(self, name: str, a: Tile, b: Tile) -> Tile:
        """int1 arithmetic stays int1 and wraps modulo 2, as Triton's (docs/numerics.md, value rules):
        + and - are xor, * and // are and (x // 0 is 0), % is 0."""
        a, b = self.cast(a, D.int1), self.cast(b, D.int1)
        if name == "mod":
            return self.const(False, D.int1, a.shape)
        return self.op1({"add": "xor", "sub": "xor", "mul": "and", "floordiv": "and"}[name], [a, b])

    def unary(self, name: str, a) -> Tile:
        a = self.to_tile(a)
        a = self.cast(a, self.compute_dtype(a.dtype))
        if name in FLOAT_ONLY and not a.dtype.is_floating():
            raise SemanticError(f"tl.{name} needs a floating-point tensor, got {a.dtype} "
                                f"(cast with .to(tl.float32) first)")
        if name == "neg" and a.dtype.is_bool():
            return a   # -x wraps to x in int1 (Triton's)
        if name == "not" and not a.dtype.is_int():
            raise SemanticError(f"'~' needs an integer tensor, got {a.dtype}")
        return self.op1(name, [a])

    def where(self, c, x, y) -> Tile:
        c = self.to_tile(c)
        if c.dtype is not D.int1:
            c = self.binary("ne", c, 0)
        x, y = self._promote_pair(x, y)
        dt = D.promote(x.dtype, y.dtype) if not (x.dtype.is_ptr() or y.dtype.is_ptr()) else x.dtype
        c, x, y = self.broadcast_all(c, self.cast(x, dt), self.cast(y, dt))
        return self.op1("where", [c, x, y])

    def fma(self, x, y, z) -> Tile:
        tiles = [t for t in (x, y, z) if isinstance(t, Tile)]
        dt = tiles[0].dtype if tiles else D.float32
        for t in tiles[1:]:
            dt = D.promote(dt, t.dtype)
        dt = self.compute_dtype(dt)
        if not dt.is_floating():
            raise SemanticError(f"tl.fma needs floating-point operands, got {dt}")
        xs = [self.cast(self.to_tile(t, dt), dt) for t in (x, y, z)]
        return self.op1("fma", self.broadcast_all(*xs))

    # -- memory -------------------------------------------------------------------------------
    def load(self, ptr, mask=None, other=None) -> Tile:
        ptr = self.to_tile(ptr)
        if not ptr.dtype.is_ptr():
            raise SemanticError(f"tl.load expects a pointer, got a {ptr.dtype} value")
        elem = ptr.dtype.element_ty
        parts = [ptr]
        if mask is not None:
            mask = self.to_tile(mask)
            if mask.dtype is not D.int1:
                raise SemanticError(f"tl.load mask must be a boolean (int1) tensor, got {mask.dtype}")
            parts.append(mask)
            other = self.cast(self.to_tile(0 if other is None else other, elem), elem)
            parts.append(other)
        elif other is not None:
            other = None  # Triton ignores `other` without a mask
        parts = self.broadcast_all(*parts)
        return self.op1("load", parts)

    def store(self, ptr, value, mask=None) -> None:
        ptr = self.to_tile(ptr)
        if not ptr.dtype.is_ptr():
            raise SemanticError(f"tl.store expects a pointer, got a {ptr.dtype} value")
        elem = ptr.dtype.element_ty
        value = self.cast(self.to_tile(value, elem), elem)
        parts = [ptr, value]
        if mask is not None:
            mask = self.to_tile(mask)
            if mask.dtype is not D.int1:
                raise SemanticError(f"tl.store mask must be a boolean (int1) tensor, got {mask.dtype}")
            parts.append(mask)
        shape = self.broadcast_shape(*(p.shape for p in parts))
        if shape != ptr.shape:
            ptr = self.broadcast_to(ptr, shape)
        parts = [ptr] + [self.broadcast_to(p, shape) for p in parts[1:]]
        self.op("store", parts)

    # -- reductions and dot -------------------------------------------------------------------
    def reduce(self, kind: str, x, axis=None, keep_dims=False, out_dtype=None) -> Tile:
        x = self.to_tile(x)
        if not x.shape:
            return x
        if axis is None:
            if keep_dims:
                rank = len(x.shape)
                r = self.reduce(kind, x, None, False, out_dtype)
                for _ in range(rank):
                    r = self.expand_dims(r, 0)
                return r
            for ax in reversed(range(len(x.shape))):  # fixed order: last axis first
                x = self.reduce(kind, x, ax, False, out_dtype)
            return x
        if not isinstance(axis, int):
            raise SemanticError(f"reduction axis must be a constexpr int, got {axis!r}")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise SemanticError(f"reduction axis {axis} out of range for a {rank}-D tile")
        axis %= rank
        dt = x.dtype
        if out_dtype is not None:
            x = self.cast(x, out_dtype)
            dt = out_dtype
        elif kind == "sum" and dt.is_int() and dt.bits < 32:
            dt = D.uint32 if dt.is_unsigned() else D.int32
            x = self.cast(x, dt)
        if dt in D.FP8:
            x = self.cast(x, D.float32)
            dt = D.float32
        attrs = {"axis": axis, "kind": kind}
        if kind == "sum" and dt in (D.float16, D.bfloat16):
            # numerics contract: accumulate in fp32, round to the input dtype once
            r = self.op1("reduce", [x], {**attrs, "out_dtype": D.float32})
            r = self.cast(r, dt)
        else:
            r = self.op1("reduce", [x], attrs)
        if keep_dims:
            r = self.expand_dims(r, axis)
        return r

    def dot(self, a, b, acc=None, out_dtype=D.float32) -> Tile:
        a, b = self.to_tile(a), self.to_tile(b)
        if len(a.shape) == 3 and len(b.shape) == 3:
            return self._batched_dot(a, b, acc, out_dtype)
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise SemanticError(f"tl.dot needs 2-D tiles, got {a.type} and {b.type}")
        if a.shape[1] != b.shape[0]:
            raise SemanticError(f"tl.dot inner dimensions differ: {a.type} @ {b.type}")
        if a.dtype in D.FP8 or b.dtype in D.FP8:   # every fp8 value is exact in fp16
            a, b = (self.cast(t, D.float16) if t.dtype in D.FP8 else t for t in (a, b))
        if a.dtype is not b.dtype:
            dt = D.promote(a.dtype, b.dtype)
            a, b = self.cast(a, dt), self.cast(b, dt)
        acc_dt = D.int32 if a.dtype.is_int() else D.float64 if a.dtype is D.float64 else (out_dtype or D.float32)
        shape = (a.shape[0], b.shape[1])
        if acc is None:
            acc = self.const(0, acc_dt, shape)
        else:
            acc = self.to_tile(acc)
            if acc.shape != shape:
                raise SemanticError(f"tl.dot acc has shape {list(acc.shape)}, expected {list(shape)}")
        return self.op1("dot", [a, b, acc])

    def _batched_dot(self, a: Tile, b: Tile, acc, out_dtype) -> Tile:
        """tl.dot of [B, M, K] and [B, K, N] tiles: one 2-D dot per batch element (each with the 2-D
        dot's numerics), gathered into [B, M, N] by selection: the same bits as B separate dots."""
        n = a.shape[0]
        if b.shape[0] != n:
            raise SemanticError(f"tl.dot: batch sizes differ: {a.type} @ {b.type}")
        acc = self.to_tile(acc) if acc is not None else None
        outs = [self.dot(_take(self, a, i), _take(self, b, i), _take(self, acc, i) if acc is not None else None,
                         out_dtype) for i in range(n)]
        shape = (n,) + outs[0].shape
        r = self.broadcast_to(self.expand_dims(outs[0], 0), shape)
        idx = _batch_index(self, n)
        for i in range(1, n):
            r = self.where(self.binary("eq", idx, i), self.expand_dims(outs[i], 0), r)
        return r


def _batch_index(b: Builder, n: int) -> Tile:
    return b.op1("reshape", [b.op1("arange", [], {"start": 0, "end": n})], {"shape": (n, 1, 1)})


def _take(b: Builder, t: Tile, i: int) -> Tile:
    """Element i along axis 0 of a 3-D tile, exactly: the other elements are replaced by the sum's
    identity (-0.0 for floats, which adds exactly to any value)."""
    if t.shape[0] == 1:
        return b.op1("reshape", [t], {"shape": t.shape[1:]})
    hit = b.broadcast_to(b.binary("eq", _batch_index(b, t.shape[0]), i), t.shape)
    zero = -0.0 if t.dtype.is_floating() else 0
    return b.cast(b.reduce("sum", b.where(hit, t, zero), 0), t.dtype)


def fold_python_binary(name: str, a, b):
    """Constexpr arithmetic with Triton's C-like integer semantics for // and %."""
    if name == "floordiv" and isinstance(a, int) and isinstance(b, int):
        q = builtins.abs(a) // builtins.abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if name == "mod" and isinstance(a, int) and isinstance(b, int):
        r = builtins.abs(a) % builtins.abs(b)
        return r if a >= 0 else -r
    if name == "mod" and isinstance(a, float) or isinstance(b, float) and name == "mod":
        return math.fmod(a, b)
    return PY_BINARY[name](a, b)


PY_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b, "pow": lambda a, b: a ** b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}
