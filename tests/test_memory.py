"""runtime.memory: the pool (random alloc/free cycles, coalescing, OOM with stats, double free)
and the KV-cache planner's arithmetic."""
import random

import pytest
import torch

from runtime import InvalidFreeError, KVCachePlanError, OutOfMemoryError
from runtime.memory import MemoryPool, free_memory_now, plan_kv_cache

pytestmark = pytest.mark.no_toolchain

MiB = 1 << 20


@pytest.mark.parametrize("strategy", ["best", "first"])
def test_random_cycles_leave_nothing_in_use(strategy):
    pool = MemoryPool("cpu", 8 * MiB, strategy=strategy)
    rng = random.Random(7)
    live = []
    peak_seen = ooms = 0
    for i in range(100_000):
        if live and (rng.random() < 0.5 or len(live) > 200):
            pool.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice((rng.randrange(1, 512), rng.randrange(512, 64 << 10), rng.randrange(64 << 10, 256 << 10)))
            try:
                live.append(pool.alloc(size))
            except OutOfMemoryError:
                ooms += 1
        peak_seen = max(peak_seen, pool.stats().in_use) if i % 97 == 0 else peak_seen
        if i % 10_000 == 0:
            pool.check()
    for b in live:
        pool.free(b)
    pool.check()
    st = pool.stats()
    assert st.in_use == 0 and st.requested == 0 and st.live_blocks == 0
    assert st.free_blocks == 1 and st.largest_free == st.free == st.reserved == 8 * MiB and st.fragmentation == 0.0
    assert st.allocs == st.frees > 40_000 and st.peak >= peak_seen > 0
    assert 0 < ooms < 10_000      # the pool ran full at times, so splitting and merging were exercised


def test_alignment_and_views():
    pool = MemoryPool("cpu", 1 * MiB, alignment=512)
    blocks = [pool.alloc(n) for n in (1, 100, 513, 3000)]
    for b in blocks:
        assert b.ptr % 512 == 0 and b.offset % 512 == 0 and b.size >= b.nbytes
    t = blocks[2].tensor(torch.float32, (8, 16))
    t.fill_(3.0)
    assert blocks[2].tensor(torch.float32).shape == (128,) and float(blocks[2].tensor(torch.float32).sum()) == 384.0
    with pytest.raises(Exception, match="needs"):
        blocks[0].tensor(torch.float32, (1000,))


def test_coalescing_neighbours():
    pool = MemoryPool("cpu", 64 * 1024, strategy="first")
    a, b, c, d = (pool.alloc(16 * 1024) for _ in range(4))     # fills the pool exactly
    assert pool.stats().free == 0
    pool.free(b)
    pool.free(d)
    with pytest.raises(OutOfMemoryError):
        pool.alloc(32 * 1024)                                   # 32 KiB free, in two pieces
    assert pool.stats().fragmentation == 0.5
    pool.free(c)                                               # b, c, d merge into one block
    st = pool.stats()
    assert st.free_blocks == 1 and st.largest_free == 48 * 1024 and st.fragmentation == 0.0
    big = pool.alloc(b.size + c.size + d.size)
    assert big.offset == b.offset and pool.stats().free == 0
    pool.free(a)
    pool.free(big)
    pool.check()
    assert pool.stats().largest_free == 64 * 1024


def test_oom_error_carries_stats_and_request():
    pool = MemoryPool("cpu", 1 * MiB)
    keep = pool.alloc(512 * 1024)
    with pytest.raises(OutOfMemoryError) as e:
        pool.alloc(600 * 1024)
    err = e.value
    assert err.request == 600 * 1024 and err.stats.in_use == keep.size and err.stats.reserved == 1 * MiB
    msg = str(err)
    assert "cannot allocate 600.00 KiB (614400 bytes" in msg
    assert "reserved 1.00 MiB, in use 512.00 KiB" in msg and "largest free block 512.00 KiB" in msg
    assert "fragmentation 0.000" in msg and "peak 512.00 KiB" in msg


def test_double_free_and_foreign_block():
    p1, p2 = MemoryPool("cpu", 64 * 1024), MemoryPool("cpu", 64 * 1024)
    b = p1.alloc(100)
    p1.free(b)
    with pytest.raises(InvalidFreeError, match=r"double free of the block at offset 0 \(256 bytes\)"):
        p1.free(b)
    c = p2.alloc(100)
    with pytest.raises(InvalidFreeError, match="does not belong to this pool"):
        p1.free(c)
    # a new block at the same offset is not confused with the freed one
    b2 = p1.alloc(100)
    assert b2.offset == b.offset
    with pytest.raises(InvalidFreeError):
        p1.free(b)
    p1.free(b2)


def test_pool_sized_by_ratio_of_free_memory():
    pool = MemoryPool("cpu", ratio=0.5, free_bytes=10 * MiB)
    assert pool.reserved == 5 * MiB
    assert free_memory_now("cpu") > 0
    with pytest.raises(ValueError):
        MemoryPool("cpu", ratio=1.5, free_bytes=MiB)


def test_kv_planner_worked_example():
    # Llama-3-8B shape: 32 layers, 8 KV heads, head_dim 128, bf16, 10 GiB, 20% headroom
    # per token 2*32*8*128*2 = 131072 B; usable 0.8 * 10 GiB = 8589934592 B; 65536 tokens
    plan = plan_kv_cache(32, 8, 128, torch.bfloat16, memory_bytes=10 << 30)
    assert plan.bytes_per_token == 131072 and plan.usable_bytes == 8589934592 and plan.max_tokens == 65536
    assert plan.tokens == 65536 and plan.total_bytes == 8 << 30
    ok = plan_kv_cache(32, 8, 128, "fp16", 65536, memory_bytes=10 << 30)
    assert ok.total_bytes == 8 << 30
    # fp32, 4 layers, 2 heads, 64 dim: 2*4*2*64*4 = 4096 B/token; 1 MB * 0.9 = 900000 B -> 219 tokens
    assert plan_kv_cache(4, 2, 64, torch.float32, memory_bytes=1_000_000, headroom=0.1).max_tokens == 219
    with pytest.raises(KVCachePlanError) as e:
        plan_kv_cache(32, 8, 128, torch.bfloat16, 65537, memory_bytes=10 << 30)
    msg = str(e.value)
    assert "65537 tokens x 131072 B = 8590065664 B" in msg and "> 8589934592 B usable" in msg
    assert "2 (K,V) x 32 layers x 8 kv heads x 128 head_dim x 2 B (bfloat16) = 131072 B" in msg
    assert "10737418240 B x (1 - 0.2 headroom) = 8589934592 B" in msg and "at most 65536 tokens" in msg


def test_eight_threads_fuzz_keeps_every_invariant():
    """Random allocs, frees and views from 8 threads at once (the pool takes one lock per call);
    each thread also checks that its own blocks never overlap another live block's bytes."""
    import sys
    import threading
    pool = MemoryPool("cpu", 4 * MiB, alignment=64)
    errors, owner = [], {}
    guard = threading.Lock()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)      # switch threads as often as possible

    def work(seed):
        rng, live = random.Random(seed), []
        try:
            for _ in range(4000):
                if live and rng.random() < 0.5:
                    b = live.pop(rng.randrange(len(live)))
                    with guard:
                        del owner[b.offset]
                    pool.free(b)
                else:
                    try:
                        b = pool.alloc(rng.randrange(1, 16 << 10))
                    except OutOfMemoryError:
                        continue
                    with guard:
                        for off, other in owner.items():
                            assert off + other.size <= b.offset or b.offset + b.size <= off, "overlapping blocks"
                        owner[b.offset] = b
                    b.tensor(torch.uint8).fill_(seed)
                    live.append(b)
            for b in live:
                with guard:
                    del owner[b.offset]
                pool.free(b)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:3]
    pool.check()
    st = pool.stats()
    assert st.in_use == 0 and st.live_blocks == 0 and st.allocs == st.frees > 1000


@pytest.mark.no_toolchain
def test_kv_planner_sizing_from_the_pool_in_eight_threads():
    """Scheduler threads of a serving process: each sizes KV caches from the pool's largest free
    block (half of it kept as headroom) and allocates them while the others do the same. Every
    plan and every refusal is the one the planner gives alone for the same arguments, the blocks
    never overlap and the pool's invariants hold."""
    import sys
    import threading
    pool = MemoryPool("cpu", 8 * MiB, alignment=64)
    shapes = [(layers, heads, dim, dt) for layers in (1, 2, 4) for heads in (1, 2, 8) for dim in (16, 64, 128)
              for dt in ("fp32", "bf16", torch.float16, "int8")]
    seen, errors = [], []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(seed):
        rng, live = random.Random(seed), []
        try:
            for _ in range(1000):
                shape = rng.choice(shapes)
                args = (*shape, rng.choice([None, rng.randrange(0, 400)]))
                kw = {"memory_bytes": pool.stats().largest_free, "headroom": 0.5}
                try:
                    plan = plan_kv_cache(*args, **kw)
                except KVCachePlanError as e:
                    seen.append((args, kw, str(e)))
                    continue
                seen.append((args, kw, plan))
                if plan.total_bytes:
                    try:
                        live.append(pool.alloc(plan.total_bytes))
                        live[-1].tensor(torch.uint8).fill_(seed)
                    except OutOfMemoryError:
                        pass
                if live and rng.random() < 0.6:
                    b = live.pop(rng.randrange(len(live)))
                    assert bool((b.tensor(torch.uint8) == seed).all()), "another thread wrote into this block"
                    b.free()
            for b in live:
                b.free()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:3]
    for args, kw, got in seen:
        try:
            alone = plan_kv_cache(*args, **kw)
        except KVCachePlanError as e:
            alone = str(e)
        assert got == alone, (args, kw)
    assert len(seen) == 8000 and any(isinstance(g, str) for *_, g in seen)
    pool.check()
    assert pool.stats().in_use == 0


def test_released_pool_says_so():
    from runtime.errors import DeviceError
    pool = MemoryPool("cpu", 1 * MiB)
    b = pool.alloc(100)
    pool.release()
    pool.release()                  # a second release does nothing
    for call in (lambda: pool.alloc(10), lambda: b.tensor(), lambda: pool.free(b)):
        with pytest.raises(DeviceError, match="released memory pool.*Create a new MemoryPool"):
            call()
    assert "released" in repr(pool)
