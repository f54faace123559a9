"""Builtins made of the IR's existing ops, the same on every target: tl.reduce with a combine
function, tl.xor_sum / reduce_or, tl.cat, tl.broadcast, tl.gather, tl.histogram, tl.item,
tl.squeeze / tl.unsqueeze, and umulhi of 64-bit integers.

Each is a fixed composition, so its order (and its bits) do not depend on the target or on batch
dimensions:
- tl.reduce(x, axis, combine_fn): a tree over the axis pairing neighbours, (x0 . x1), (x2 . x3),
  ..., then the same over the results, so an associative combine function gives the left fold's
  result, in one order on every target and for every batch; the extent must be a power of two (as
  Triton's tiles are);
- tl.gather and tl.histogram: one-hot comparisons reduced along the compared axis (the gathered
  element is added to -0.0 terms, exact for every value);
- tl.cat: the two tiles joined and reshaped (x's elements first along `dim`)."""
from __future__ import annotations

from . import dtypes as D
from .builtins_common import _axis, _const_int, python_function
from .builtins_tiles import reshape
from .semantic import SemanticError, Tile


def reduce_with(visitor, node, inputs, axis, combine_fn, keep_dims=False):
    """tl.reduce: `combine_fn` (a @jit function of two groups of scalars) applied as a tree of
    neighbour pairs along `axis` (see the module docstring)."""
    b = visitor.builder
    single = isinstance(inputs, Tile)
    tiles = [b.to_tile(t) for t in ([inputs] if single else list(inputs))]
    if axis is None:
        tiles = [reshape(b, t, (t.type.numel,)) for t in tiles]
        axis = 0
    shape = tiles[0].shape
    if any(t.shape != shape for t in tiles):
        raise SemanticError("tl.reduce: the input tensors must have one shape, got "
                            + ", ".join(str(list(t.shape)) for t in tiles))
    axis = _axis("reduce", axis, len(shape))
    n = shape[axis]
    if n & (n - 1):
        raise SemanticError(f"tl.reduce with a combine function needs a power-of-two extent along the axis, got {n} "
                            "(pad the tile, masking the extra elements with the combine function's identity)")
    fn = combine_fn if callable(combine_fn) and hasattr(combine_fn, "__code__") else python_function(combine_fn)
    if fn is None:
        raise SemanticError("tl.reduce: combine_fn must be a @triton.jit / @kernel function")

    def combine(los, his):
        out = visitor._inline(node, fn, los + his, {}, owner=combine_fn)
        out = list(out) if isinstance(out, tuple) else [out]
        if len(out) != len(los):
            raise SemanticError(f"tl.reduce: combine_fn returned {len(out)} values for {len(los)} inputs")
        return out

    tiles = [_drop_axis(b, t, axis, keep_dims) for t in _tree(b, tiles, axis, combine)]
    return tiles[0] if single else tuple(tiles)


def _tree(b, tiles, axis, combine):
    """The tiles reduced along `axis` (a power-of-two extent) by `combine(los, his)` over neighbour
    pairs, level by level, down to extent 1 (the axis kept)."""
    while tiles[0].shape[axis] > 1:
        halves = [_pairs_along(b, t, axis) for t in tiles]
        out = combine([lo for lo, _ in halves], [hi for _, hi in halves])
        tiles = [b.broadcast_to(b.to_tile(o), lo.shape) for o, (lo, _) in zip(out, halves)]
    return tiles


def _pairs_along(b, t: Tile, axis: int):
    """(t[..., 2i, ...], t[..., 2i + 1, ...]) along `axis`, each with that axis halved."""
    shape = t.shape
    r = reshape(b, t, shape[:axis] + (shape[axis] // 2, 2) + shape[axis + 1:])
    rank = len(shape) + 1
    if axis + 1 != rank - 1:
        perm = [k for k in range(rank) if k != axis + 1] + [axis + 1]
        r = b.op1("trans", [r], {"perm": perm})
    lo, hi = b.op("split", [r])
    return lo, hi


def _drop_axis(b, t: Tile, axis: int, keep_dims: bool) -> Tile:
    """`t` (extent 1 along `axis`) without that axis, or with it when keep_dims."""
    if keep_dims:
        return t
    shape = t.shape[:axis] + t.shape[axis + 1:]
    return item_of(b, t) if not shape else reshape(b, t, shape)


def item_of(b, t: Tile) -> Tile:
    """The one element of a single-element tile, as a scalar."""
    t = b.to_tile(t)
    if not t.shape:
        return t
    if t.type.numel != 1:
        raise SemanticError(f"tl.item needs a single-element tensor, got shape {list(t.shape)}")
    return b.op1("reshape", [t], {"shape": ()})


def _bitwise_reduce(b, name, x, axis, keep_dims, op):
    x = b.to_tile(x)
    if not x.dtype.is_int():
        raise SemanticError(f"tl.{name} needs an integer tensor, got {x.dtype}")
    dt = x.dtype
    if axis is None:
        x = reshape(b, x, (x.type.numel,))
        axis = 0
    axis = _axis(name, axis, len(x.shape))
    n = x.shape[axis]
    if n & (n - 1):
        raise SemanticError(f"tl.{name} needs a power-of-two extent along the axis, got {n}")
    (x,) = _tree(b, [x], axis, lambda los, his: [b.op1(op, [los[0], his[0]])])
    return b.cast(_drop_axis(b, x, axis, keep_dims), dt)


def _xor_sum(b, name, a):
    return _bitwise_reduce(b, name, a["input"], a["axis"], a["keep_dims"], "xor")


def _reduce_or(b, name, a):
    return _bitwise_reduce(b, name, a["input"], a["axis"], a["keep_dims"], "or")


def _cat(b, name, a):
    x, y = b.to_tile(a["input"]), b.to_tile(a["other"])
    if x.shape != y.shape or not x.shape:
        raise SemanticError(f"tl.cat needs two tiles of one shape, got {list(x.shape)} and {list(y.shape)}")
    dt = D.promote(x.dtype, y.dtype) if not x.dtype.is_ptr() else x.dtype
    x, y = b.cast(x, dt), b.cast(y, dt)
    dim = _axis(name, a["dim"], len(x.shape))
    j = b.op1("join", [x, y])                       # [..., 2]: x then y on the new last axis
    rank = len(x.shape) + 1
    perm = list(range(dim)) + [rank - 1] + list(range(dim, rank - 1))
    j = b.op1("trans", [j], {"perm": perm})         # the pair axis just before `dim`
    return reshape(b, j, x.shape[:dim] + (2 * x.shape[dim],) + x.shape[dim + 1:])


def _broadcast(b, name, a):
    x, y = b.to_tile(a["input"]), b.to_tile(a["other"])
    return tuple(b.broadcast_all(x, y))


def _gather(b, name, a):
    src, idx = b.to_tile(a["src"]), b.to_tile(a["index"])
    rank = len(src.shape)
    if len(idx.shape) != rank or not rank:
        raise SemanticError(f"tl.gather: src and index need one rank, got {list(src.shape)} and {list(idx.shape)}")
    axis = _axis(name, a["axis"], rank)
    if not idx.dtype.is_int():
        raise SemanticError(f"tl.gather: index must be integers, got {idx.dtype}")
    for d in range(rank):
        if d != axis and idx.shape[d] != src.shape[d]:
            raise SemanticError(f"tl.gather: index and src must agree outside the axis, got {list(idx.shape)} and "
                                f"{list(src.shape)}")
    n = src.shape[axis]
    # hit[..., k] = index == k, with the candidates k on a new last axis
    k = reshape(b, b.op1("arange", [], {"start": 0, "end": n}), (1,) * rank + (n,))
    hit = b.binary("eq", b.expand_dims(b.cast(idx, D.int32), rank), k)
    perm = [d for d in range(rank) if d != axis] + [axis]
    s = b.op1("trans", [src], {"perm": perm}) if perm != list(range(rank)) else src
    s = b.expand_dims(s, axis)                       # src's axis last, a 1 where idx runs along it
    zero = -0.0 if src.dtype.is_floating() else 0    # -0.0 + v is v for every v
    picked = b.where(hit, s, zero)
    if src.dtype.is_floating():
        picked = b.cast(picked, b.compute_dtype(src.dtype))
    return b.cast(b.reduce("sum", picked, rank), src.dtype)


def _histogram(b, name, a):
    x = b.to_tile(a["input"])
    bins = _const_int(name, "num_bins", a["num_bins"])
    if len(x.shape) != 1 or not x.dtype.is_int():
        raise SemanticError(f"tl.histogram needs a 1-D integer tensor, got {x.type}")
    if bins <= 0:
        raise SemanticError(f"tl.histogram: num_bins must be positive, got {bins}")
    k = reshape(b, b.op1("arange", [], {"start": 0, "end": bins}), (1, bins))
    hit = b.binary("eq", b.expand_dims(b.cast(x, D.int64 if x.dtype.bits > 32 else D.int32), 1), k)
    if a["mask"] is not None:
        hit = b.binary("and", hit, b.expand_dims(b.to_tile(a["mask"]), 1))
    return b.reduce("sum", b.cast(hit, D.int32), 0)   # values outside [0, num_bins) count nowhere


def _squeeze(b, name, a):
    x = b.to_tile(a["x"])
    dim = _axis(name, a["dim"], len(x.shape))
    if x.shape[dim] != 1:
        raise SemanticError(f"tl.squeeze: dimension {dim} has size {x.shape[dim]}, not 1")
    return _drop_axis(b, x, dim, False)


def _unsqueeze(b, name, a):
    x = b.to_tile(a["x"])
    return b.expand_dims(x, _axis(name, a["dim"], len(x.shape), extra=1))


def _item(b, name, a):
    return item_of(b, a["input"])


HANDLERS = {
    "xor_sum": _xor_sum, "reduce_or": _reduce_or, "cat": _cat, "broadcast": _broadcast, "gather": _gather,
    "histogram": _histogram, "squeeze": _squeeze, "unsqueeze": _unsqueeze, "item": _item,
}
