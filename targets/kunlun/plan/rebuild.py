"""Building IR inside the plan's rewrites: ops appended to a block with their result types from
the op registry's rules, constants, and the clone of an op with one dimension cut to a chunk."""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Block, Loc, Op, TileType, Value, infer
from compiler.ir.ops import ADD, ARANGE, BROADCAST, CONST, MAX, MIN


class Emitter:
    """Appends ops to `block`; every op gets `loc` (the source line of what it replaces)."""

    def __init__(self, block: Block, loc: Loc | None = None):
        self.block = block
        self.loc = loc

    def op(self, name: str, operands: list[Value], attrs: dict | None = None,
           blocks: list[Block] | None = None) -> Op:
        attrs = dict(attrs or {})
        op = Op(name, operands, infer(name, [o.type for o in operands], attrs), attrs, blocks, self.loc)
        self.block.append(op)
        return op

    def v(self, name: str, operands: list[Value], attrs: dict | None = None) -> Value:
        return self.op(name, operands, attrs).results[0]

    def const(self, value, dt: D.dtype, shape=()) -> Value:
        return self.v("const", [], {"value": value, "type": TileType(dt, tuple(shape))})

    def splat(self, scalar: Value, shape) -> Value:
        return scalar if scalar.shape == tuple(shape) else self.v("broadcast", [scalar], {"shape": tuple(shape)})

    def i32(self, value: int) -> Value:
        return self.const(int(value), D.int32)


def identity(kind: str, dt: D.dtype):
    """The value a reduction of `kind` starts from."""
    if kind == "sum":
        return False if dt.is_bool() else (0.0 if dt.is_floating() else 0)
    if dt.is_floating():
        return float("-inf") if kind == "max" else float("inf")
    if dt.is_bool():
        return kind != "max"
    lo, hi = -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1
    return lo if kind == "max" else hi


COMBINE = {"sum": ADD, "max": MAX, "min": MIN}   # the elementwise op that merges two partial results


def chunked(t: TileType, axis: int | None, size: int) -> TileType:
    if axis is None:
        return t
    shape = list(t.shape)
    shape[axis] = size
    return TileType(t.dtype, tuple(shape))


def clone_chunked(em: Emitter, op: Op, operands: list[Value], axes: list[int | None], size: int,
                  offset: Value | None) -> list[Value]:
    """`op` rebuilt over `operands`, with result i's axis `axes[i]` cut to `size` elements; an
    arange along the cut axis starts at `offset` (the chunk's first index)."""
    attrs = dict(op.attrs)
    ax = axes[0] if axes else None
    if op.name == ARANGE and ax is not None:
        start = attrs["start"]
        a = em.v("arange", [], {"start": start, "end": start + size})
        return [em.v("add", [a, em.splat(offset, (size,))])]
    if op.name == CONST and ax is not None:
        attrs["type"] = chunked(attrs["type"], ax, size)
    elif op.name == BROADCAST and ax is not None:
        attrs["shape"] = chunked(op.results[0].type, ax, size).shape
    new = em.op(op.name, operands, attrs)
    want = [chunked(r.type, a, size) for r, a in zip(op.results, axes)]
    if [r.type for r in new.results] != want:
        raise AssertionError(f"internal: chunked '{op.name}' types {new.results} != {want}")
    return new.results
