"""Scans and arg-reductions carried across the chunks of a strip-mined dimension (passes.py runs
them as roots of a pass, whose chunks then go in ascending order).

scan (`tl.cumsum`, in index order): the running sum so far is carried into the next chunk by
adding it to that chunk's first element before the chunk is scanned, so every element is the
same chain of additions as in the whole row: (carry + x0) + x1 + ... A reverse scan walks the
chunks from the last, its carry entering each chunk's last element. The carry starts at -0.0
(the additive identity for every float, -0.0 itself included; 0 for integers), and the next one
is the chunk's last element, read off exactly with a sum of it and -0.0s.

arg-reduction (`tl.argmax`, `tl.max(..., return_indices=True)`): each chunk's (value, index) is
folded into the carried pair by the rule the whole-row scan applies element by element
(cfamily's op_argreduce): the first chunk's pair is taken, a later one where it compares strictly
greater (less), or where the carried value is NaN and the chunk's is not. Ties keep the lowest
index, NaN elements are ignored, and an all-NaN row gives NaN at index 0, as without chunks.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Op, Value

from .rebuild import Emitter, identity


def _along(em: Emitter, shape, axis: int, index: int) -> Value:
    """An int1 tile of `shape`, true where the index along `axis` is `index`."""
    n = shape[axis]
    at = em.v("eq", [em.v("arange", [], {"start": 0, "end": n}), em.splat(em.i32(index), (n,))])
    for ax in range(len(shape)):
        if ax != axis:
            at = em.v("expand_dims", [at], {"axis": ax})
    return em.v("broadcast", [at], {"shape": tuple(shape)}) if at.shape != tuple(shape) else at


def _spread(em: Emitter, v: Value, shape, axis: int) -> Value:
    """`v` (the shape without `axis`) broadcast along `axis` to `shape`."""
    if v.type.is_scalar:
        return em.splat(v, shape)
    return em.v("broadcast", [em.v("expand_dims", [v], {"axis": axis})], {"shape": tuple(shape)})


def scan_init(em: Emitter, op: Op) -> Value:
    r = op.results[0]
    shape = r.shape[:op.attrs["axis"]] + r.shape[op.attrs["axis"] + 1:]
    return em.const(-0.0 if r.dtype.is_floating() else 0, r.dtype, shape)


def scan_chunk(em: Emitter, op: Op, x: Value, carry: Value) -> tuple[Value, Value]:
    """(the chunk's scan, the next carry) of chunk `x`; a reverse scan runs from the chunk's last
    element to its first (and its pass from the last chunk to the first)."""
    axis, n = op.attrs["axis"], x.shape[op.attrs["axis"]]
    start, end = (n - 1, 0) if op.attrs.get("reverse") else (0, n - 1)
    first = _along(em, x.shape, axis, start)
    x = em.v("where", [first, em.v("add", [x, _spread(em, carry, x.shape, axis)]), x])
    out = em.v("scan", [x], dict(op.attrs))
    last = _along(em, x.shape, axis, end)
    zero = em.const(-0.0 if x.dtype.is_floating() else 0, x.dtype, x.shape)
    nxt = em.v("reduce", [em.v("where", [last, out, zero])], {"axis": axis, "kind": "sum", "order": "sequential"})
    return out, nxt


def arg_inits(em: Emitter, op: Op) -> list[Value]:
    v, i = op.results
    return [em.const(identity(op.attrs["kind"], v.dtype), v.dtype, v.shape), em.const(0, D.int32, i.shape)]


def arg_chunk(em: Emitter, op: Op, x: Value, carried: list[Value], offset: Value, iteration: Value) -> list[Value]:
    """The carried (value, index) after chunk `x`, whose first index along the axis is `offset`."""
    best, at = carried
    v, i = em.op("argreduce", [x], dict(op.attrs)).results
    i = em.v("add", [i, em.splat(offset, i.shape)])
    first = em.splat(em.v("eq", [iteration, em.i32(0)]), v.shape)
    take = em.v("or", [first, em.v("gt" if op.attrs["kind"] == "max" else "lt", [v, best])])
    if v.dtype.is_floating():   # NaN so far (every chunk all NaN) gives way to a number
        nan_so_far = em.v("and", [em.v("ne", [best, best]), em.v("eq", [v, v])])
        take = em.v("or", [take, nan_so_far])
    return [em.v("where", [take, v, best]), em.v("where", [take, i, at])]
