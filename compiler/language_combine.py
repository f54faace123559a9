"""Tile-language builtins made of the IR's own ops (compiler/builtins_combine.py implements them):
tl.reduce with a combine function, xor_sum, reduce_or, cat, broadcast, gather, histogram, item,
squeeze, unsqueeze. Part of `compiler.language`, which imports them."""
from __future__ import annotations

from .builtin_registry import builtin


@builtin
def reduce(input, axis, combine_fn, keep_dims=False):
    """`combine_fn` (a @jit function of two groups of scalars returning one group) applied along
    `axis` as a tree of neighbour pairs, (x0 . x1), (x2 . x3), ...: for an associative function the
    left fold's result, in one order on every target and for every batch. `input` may be a tuple of
    tensors (the function then takes and returns tuples). The extent must be a power of two."""


@builtin
def xor_sum(input, axis=None, keep_dims=False):
    """Bitwise xor of the integers along `axis` (all axes when None)."""


@builtin
def reduce_or(input, axis, keep_dims=False):
    """Bitwise or of the integers along `axis`."""


@builtin
def cat(input, other, can_reorder=False, dim=0):
    """The two tiles (one shape) concatenated along `dim`: `input`'s elements first (also with
    can_reorder=True)."""


@builtin
def broadcast(input, other):
    """Both tiles broadcast to their common shape (a tuple)."""


@builtin
def gather(src, index, axis):
    """out[..., i, ...] = src[..., index[..., i, ...], ...] along `axis`; index and src have one
    rank and agree outside the axis. An index outside the axis gives 0."""


@builtin
def histogram(input, num_bins, mask=None):
    """int32 counts of the values 0 .. num_bins-1 in the 1-D integer tile `input` (where `mask`);
    other values count nowhere."""


@builtin
def item(input):
    """The one element of a single-element tensor, as a scalar."""


@builtin
def squeeze(x, dim):
    """`x` without its size-1 axis `dim` (negative counts from the end)."""


@builtin
def unsqueeze(x, dim):
    """`x` with a size-1 axis inserted at `dim` (negative counts from the end of the result)."""
