"""A memory pool over one arena, and a KV-cache planner.

The pool takes ONE buffer from the device when it is created and sub-allocates it, so the steady
state of a serving loop makes no device calls and cannot fragment the device allocator. Create
it after the weights are loaded: by default it takes `ratio` (0.85) of the memory free at that
moment, which leaves the rest for the framework, activations of other libraries and the OS.

The pool is thread-safe: one lock guards its free-block index and counters (alloc, free, stats,
check, release, and the checks of Block.tensor). After `release()` every call, and every view of a
block, raises a DeviceError saying the pool was released. The KV-cache planner is a pure function
(no state), safe from any thread.

Allocation rounds a request to its size class (alignment multiples up to 4 KiB, then 8 classes
per power of two: at most 12.5% slack, and freed blocks fit later requests of a similar size),
then takes the best-fitting (or first) free block and splits off the rest. Freeing merges the
block with free neighbours, so free space is never split into adjacent pieces.
"""
from __future__ import annotations

import bisect
import dataclasses
import errno
import os
import threading
from fractions import Fraction

import torch

from .device import Device, get_device
from .errors import DeviceError, InvalidFreeError, KVCachePlanError, OutOfMemoryError


def fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def free_memory_now(device: str | Device = "cpu", index: int | None = None) -> int:
    """Bytes free on the device now (MemAvailable on cpu). Measure after loading the weights."""
    dev = device if isinstance(device, Device) else get_device(device)
    return dev.mem_get_info(index)[0]


@dataclasses.dataclass(frozen=True)
class PoolStats:
    reserved: int          # arena size
    in_use: int            # bytes in live blocks (after rounding)
    requested: int         # bytes asked for by live blocks
    peak: int              # highest in_use so far
    free: int              # reserved - in_use
    largest_free: int      # the biggest single allocation that can still succeed
    fragmentation: float   # 1 - largest_free / free (0: all free space is one block)
    live_blocks: int
    free_blocks: int
    allocs: int
    frees: int

    def __str__(self) -> str:
        return (f"reserved {fmt_bytes(self.reserved)}, in use {fmt_bytes(self.in_use)} in {self.live_blocks} "
                f"block(s) (requested {fmt_bytes(self.requested)}), peak {fmt_bytes(self.peak)}, free "
                f"{fmt_bytes(self.free)} in {self.free_blocks} block(s), largest free block "
                f"{fmt_bytes(self.largest_free)}, fragmentation {self.fragmentation:.3f}")


class Block:
    """One allocation: `offset` and `size` (rounded) within the arena, `nbytes` as requested."""

    __slots__ = ("pool", "offset", "size", "nbytes", "freed")

    def __init__(self, pool: MemoryPool, offset: int, size: int, nbytes: int):
        self.pool, self.offset, self.size, self.nbytes, self.freed = pool, offset, size, nbytes, False

    @property
    def ptr(self) -> int:
        return self.pool.base_ptr + self.offset

    def tensor(self, dtype: torch.dtype = torch.uint8, shape=None) -> torch.Tensor:
        """A view of the block as `shape` elements of `dtype` (default: as many as fit in nbytes).
        Taken under the pool's lock, so a free or release in another thread comes before (an
        error) or after it; a view taken stays a view of the arena, so free a block only when no
        thread uses its views any more."""
        item = torch.empty((), dtype=dtype).element_size()
        if shape is None:
            shape = (self.nbytes // item,)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for s in shape:
            count *= s
        with self.pool._lock:
            self.pool._check_live("Block.tensor")
            if self.freed:
                raise self.pool._error(DeviceError, errno.EFAULT, f"use of {self!r} after free")
            if count * item > self.size:
                raise self.pool._error(DeviceError, errno.EINVAL, f"a {tuple(shape)} {dtype} view needs "
                                       f"{count * item} bytes; {self!r} has {self.size}")
            start = self.pool.base_offset + self.offset
            return self.pool.arena.storage[start:start + count * item].view(dtype).view(shape)

    def free(self) -> None:
        self.pool.free(self)

    def __repr__(self) -> str:
        return f"<Block offset={self.offset} size={self.size}{' freed' if self.freed else ''}>"


class MemoryPool:
    """Sub-allocates one device arena.

    size:      arena bytes; when None, `ratio` x the free memory (`free_bytes`, measured now when
               None: pass it to make tests independent of the machine).
    alignment: every block starts at a multiple of it (absolute address), a power of two.
    strategy:  "best" (smallest free block that fits) or "first" (lowest address that fits).
    """

    def __init__(self, device: str | Device = "cpu", size: int | None = None, *, ratio: float = 0.85,
                 free_bytes: int | None = None, alignment: int = 256, strategy: str = "best",
                 index: int | None = None):
        self.device = device if isinstance(device, Device) else get_device(device)
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        if strategy not in ("best", "first"):
            raise ValueError(f"strategy must be 'best' or 'first', got {strategy!r}")
        if size is None:
            if not 0 < ratio <= 1:
                raise ValueError(f"ratio must be in (0, 1], got {ratio}")
            if free_bytes is None:
                free_bytes = free_memory_now(self.device, index)
            size = int(free_bytes * ratio)
        size -= size % alignment
        if size <= 0:
            raise ValueError(f"the pool would have {size} bytes; give a size of at least {alignment} bytes")
        self.alignment, self.strategy, self.reserved = alignment, strategy, size
        # over-allocate by one alignment so that offset 0 is aligned in absolute terms
        self.arena = self.device.malloc(size + alignment, index)
        self.base_offset = -self.arena.ptr % alignment
        self.base_ptr = self.arena.ptr + self.base_offset
        self._free_start: dict[int, int] = {0: size}     # free offset -> size
        self._free_end: dict[int, int] = {size: 0}       # free end offset -> start, for merging left
        self._by_size: list[tuple[int, int]] = [(size, 0)]   # (size, offset) of free blocks, sorted
        self._by_offset: list[int] = [0]                  # free offsets, sorted (first-fit)
        self._used: dict[int, Block] = {}
        self._in_use = self._requested = self._peak = self._allocs = self._frees = 0
        self._lock = threading.RLock()

    def _check_live(self, op: str) -> None:
        if self.arena.freed:
            raise self._error(DeviceError, errno.EINVAL,
                              f"{op} on a released memory pool: release() returned its arena to the device, so "
                              "its blocks are gone. Create a new MemoryPool.")

    # ---- free-block index ----
    def _add_free(self, off: int, size: int) -> None:
        self._free_start[off] = size
        self._free_end[off + size] = off
        bisect.insort(self._by_size, (size, off))
        bisect.insort(self._by_offset, off)

    def _remove_free(self, off: int) -> int:
        size = self._free_start.pop(off)
        del self._free_end[off + size]
        del self._by_size[bisect.bisect_left(self._by_size, (size, off))]
        del self._by_offset[bisect.bisect_left(self._by_offset, off)]
        return size

    def size_class(self, nbytes: int) -> int:
        """The rounded size of a request: alignment multiples up to 4 KiB, then 8 classes per
        power of two (so a freed block is reused by any request of up to 12.5% less)."""
        n = max(nbytes, 1)
        n = -(-n // self.alignment) * self.alignment
        if n <= 4096:
            return n
        step = max(1 << (n.bit_length() - 4), self.alignment)
        return -(-n // step) * step

    def _find(self, need: int) -> int | None:
        if self.strategy == "best":
            i = bisect.bisect_left(self._by_size, (need, -1))
            return self._by_size[i][1] if i < len(self._by_size) else None
        for off in self._by_offset:
            if self._free_start[off] >= need:
                return off
        return None

    def alloc(self, nbytes: int) -> Block:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"alloc: size must be an int >= 0, got {nbytes!r}")
        with self._lock:
            self._check_live("alloc")
            return self._alloc(nbytes)

    def _alloc(self, nbytes: int) -> Block:
        need = self.size_class(nbytes)
        off = self._find(need)
        if off is None:
            # the class rounding is for reuse only: a request that fits exactly still succeeds
            need = max(-(-nbytes // self.alignment) * self.alignment, self.alignment)
            off = self._find(need)
        if off is None:
            raise self._oom(nbytes, need)
        size = self._remove_free(off)
        if size - need >= self.alignment:          # split; the tail stays free
            self._add_free(off + need, size - need)
            size = need
        blk = Block(self, off, size, nbytes)
        self._used[off] = blk
        self._in_use += size
        self._requested += nbytes
        self._peak = max(self._peak, self._in_use)
        self._allocs += 1
        return blk

    def free(self, block: Block) -> None:
        if not isinstance(block, Block) or block.pool is not self:
            raise self._error(InvalidFreeError, errno.EINVAL, f"{block!r} does not belong to this pool")
        with self._lock:
            self._check_live("free")
            self._free(block)

    def _free(self, block: Block) -> None:
        if block.freed or self._used.get(block.offset) is not block:
            raise self._error(InvalidFreeError, errno.EINVAL,
                              f"double free of the block at offset {block.offset} ({block.size} bytes): "
                              "it was already freed")
        del self._used[block.offset]
        block.freed = True
        self._in_use -= block.size
        self._requested -= block.nbytes
        self._frees += 1
        off, size = block.offset, block.size
        # merge with the free neighbours on both sides, so free space stays in maximal blocks
        left = self._free_end.get(off)
        if left is not None:
            size += self._remove_free(left)
            off = left
        if off + size in self._free_start:
            size += self._remove_free(off + size)
        self._add_free(off, size)

    def stats(self) -> PoolStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> PoolStats:
        free = self.reserved - self._in_use
        largest = self._by_size[-1][0] if self._by_size else 0
        frag = 1.0 - largest / free if free else 0.0
        return PoolStats(self.reserved, self._in_use, self._requested, self._peak, free, largest, frag,
                         len(self._used), len(self._free_start), self._allocs, self._frees)

    def check(self) -> None:
        """Asserts the pool's invariants (for tests): blocks tile the arena with no overlap, no two
        free blocks are adjacent, and the counters match the blocks."""
        with self._lock:
            self._check()

    def _check(self) -> None:
        spans = sorted([(o, s, "free") for o, s in self._free_start.items()] +
                       [(b.offset, b.size, "used") for b in self._used.values()])
        pos, prev = 0, None
        for o, s, kind in spans:
            assert o == pos, f"gap or overlap at offset {pos} (next block at {o})"
            assert not (kind == prev == "free"), f"adjacent free blocks at {o}"
            assert o % self.alignment == 0 and s > 0
            pos, prev = o + s, kind
        assert pos == self.reserved, f"blocks end at {pos}, arena is {self.reserved}"
        assert sum(b.size for b in self._used.values()) == self._in_use
        assert sorted((s, o) for o, s in self._free_start.items()) == self._by_size
        assert sorted(self._free_start) == self._by_offset

    def release(self) -> None:
        """Returns the arena to the device (live blocks become invalid; a second call does nothing)."""
        with self._lock:
            if not self.arena.freed:
                self.device.free(self.arena)

    def _error(self, cls, code, detail: str):
        return cls(self.device.target, code, os.strerror(code), op="pool", detail=detail)

    def _oom(self, nbytes: int, need: int) -> OutOfMemoryError:
        st = self._stats()
        detail = (f"cannot allocate {fmt_bytes(nbytes)} ({nbytes} bytes, {need} after rounding) from the memory pool; "
                  f"pool: {st}. Free blocks first, or size the pool larger (size=... or ratio=...)")
        return OutOfMemoryError(self.device.target, errno.ENOMEM, os.strerror(errno.ENOMEM), op="pool alloc",
                                detail=detail, request=nbytes, stats=st)

    def __repr__(self) -> str:
        return f"<MemoryPool {self.device.target} {'released' if self.arena.freed else self.stats()}>"


# ---- KV-cache planner ----
@dataclasses.dataclass(frozen=True)
class KVCachePlan:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    itemsize: int
    bytes_per_token: int     # 2 (K and V) x layers x kv_heads x head_dim x itemsize
    memory_bytes: int
    headroom: float
    usable_bytes: int        # floor(memory_bytes x (1 - headroom))
    max_tokens: int          # usable_bytes // bytes_per_token
    tokens: int              # the tokens asked for, or max_tokens
    total_bytes: int         # tokens x bytes_per_token

    def explain(self) -> str:
        return (f"per token: 2 (K,V) x {self.layers} layers x {self.kv_heads} kv heads x {self.head_dim} head_dim x "
                f"{self.itemsize} B ({self.dtype}) = {self.bytes_per_token} B; usable: {self.memory_bytes} B x "
                f"(1 - {self.headroom:g} headroom) = {self.usable_bytes} B; max tokens: {self.usable_bytes} // "
                f"{self.bytes_per_token} = {self.max_tokens}")

    def __str__(self) -> str:
        return f"KV cache: {self.tokens} tokens, {fmt_bytes(self.total_bytes)} ({self.explain()})"


def _dtype(dtype) -> tuple[str, int]:
    if isinstance(dtype, str):
        alias = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn", "int8": "int8"}
        t = getattr(torch, alias.get(dtype, dtype), None)
        if not isinstance(t, torch.dtype):
            raise KVCachePlanError(f"plan_kv_cache: unknown dtype {dtype!r}")
        dtype = t
    return str(dtype).removeprefix("torch."), torch.empty((), dtype=dtype).element_size()


def plan_kv_cache(layers: int, kv_heads: int, head_dim: int, dtype, tokens: int | None = None, *,
                  memory_bytes: int, headroom: float = 0.2) -> KVCachePlan:
    """How many tokens of K and V fit in `memory_bytes` keeping `headroom` (a fraction) unused;
    with `tokens`, checks that they fit and raises KVCachePlanError showing the arithmetic if not."""
    for label, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if not isinstance(v, int) or v <= 0:
            raise KVCachePlanError(f"plan_kv_cache: {label} must be a positive int, got {v!r}")
    if not 0 <= headroom < 1:
        raise KVCachePlanError(f"plan_kv_cache: headroom must be in [0, 1), got {headroom}")
    name, item = _dtype(dtype)
    per_token = 2 * layers * kv_heads * head_dim * item
    # exact rational arithmetic: 0.8 x 10 GiB must not lose a token to float rounding
    usable = int(memory_bytes * (1 - Fraction(repr(headroom))))
    max_tokens = usable // per_token
    want = max_tokens if tokens is None else tokens
    plan = KVCachePlan(layers, kv_heads, head_dim, name, item, per_token, memory_bytes, headroom, usable,
                       max_tokens, want, want * per_token)
    if tokens is not None and (tokens < 0 or tokens > max_tokens):
        raise KVCachePlanError(
            f"KV cache plan does not fit: {tokens} tokens x {per_token} B = {tokens * per_token} B "
            f"({fmt_bytes(tokens * per_token)}) > {usable} B usable ({fmt_bytes(usable)}). {plan.explain()}. "
            f"Use at most {max_tokens} tokens, fewer layers/kv heads per device (tensor parallelism), "
            f"a smaller dtype, or less headroom.")
    return plan
