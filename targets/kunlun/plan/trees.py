"""Reductions carried across the chunks of a strip-mined dimension.

fast: each chunk is reduced in its own order and folded into one accumulator, chunk after chunk.

strict: the pairwise tree over a padded power-of-two extent P (docs/numerics.md: x[a] = x[a] ⊕
x[a + s] for s = P/2, ..., 1) splits exactly at chunk size C: the levels s >= C combine whole
chunks lane by lane (chunk q with chunk q + t for t = n/2, ..., 1, n = P/C), the levels s < C
are the same tree over C lanes of the one chunk left. The chunk-level tree is that same strided
tree over n chunk vectors, which equals the contiguous tree over the chunks taken in bit-reversed
order, so it can be streamed: chunk bitrev(i) is the i-th one loaded, and k + 1 = log2(n) + 1
carried slots hold the partial trees like the digits of a binary counter (slot j is full when bit
j of i is 1). Merges are selected with `where`, so the schedule needs no branch in the IR.
"""
from __future__ import annotations

import math

from compiler import dtypes as D
from compiler.ir import Op, TileType, Value

from .rebuild import COMBINE, Emitter, identity


def levels(n_chunks: int) -> int:
    return int(math.log2(n_chunks))


def bit_reversed(em: Emitter, i: Value, k: int) -> Value:
    """The k-bit reversal of scalar i."""
    rev = em.i32(0)
    for j in range(k):
        bit = em.v("and", [em.v("shr", [i, em.i32(j)]), em.i32(1)])
        rev = em.v("or", [rev, em.v("shl", [bit, em.i32(k - 1 - j)])])
    return rev


def slot_inits(em: Emitter, red: Op, chunk_type: TileType, n_chunks: int) -> list[Value]:
    """Initial values of the carried slots of a strict reduction (never read before written)."""
    acc_dt = red.results[0].dtype
    val = identity(red.attrs["kind"], acc_dt)
    return [em.const(val, acc_dt, chunk_type.shape) for _ in range(levels(n_chunks) + 1)]


def push_chunk(em: Emitter, red: Op, x_chunk: Value, slots: list[Value], i: Value) -> list[Value]:
    """The slots after chunk number i (in bit-reversed order) is added."""
    acc_dt = red.results[0].dtype
    combine = COMBINE[red.attrs["kind"]]
    carry = x_chunk if x_chunk.dtype is acc_dt else em.v("cast", [x_chunk], {"to": acc_dt})
    shape = carry.shape
    active = em.const(True, D.int1)
    out = []
    for j, slot in enumerate(slots[:-1]):
        bit = em.v("ne", [em.v("and", [em.v("shr", [i, em.i32(j)]), em.i32(1)]), em.i32(0)])
        merge = em.v("and", [active, bit])
        keep = em.v("and", [active, em.v("not", [bit])])
        merged = em.v(combine, [slot, carry])        # the earlier subtree on the left
        out.append(em.v("where", [em.splat(keep, shape), carry, slot]))
        carry = em.v("where", [em.splat(merge, shape), merged, carry])
        active = merge
    out.append(em.v("where", [em.splat(active, shape), carry, slots[-1]]))
    return out


def finish(em: Emitter, red: Op, slots: list[Value], axis: int) -> Value:
    """The reduction's result: the tree over the lanes of the last slot."""
    attrs = dict(red.attrs)
    attrs["axis"] = axis
    attrs.pop("out_dtype", None)
    return em.v("reduce", [slots[-1]], attrs)
