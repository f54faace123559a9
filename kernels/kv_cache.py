"""KV-cache write: new keys and values stored into a paged cache by slot mapping.

k, v: [tokens, Hkv, D]; k_cache, v_cache: [num_blocks, page_size, Hkv, D], contiguous (the
paged layout engines use). slot_mapping: [tokens] int32 or
int64; token t goes to page slot_mapping[t] // page_size, row slot_mapping[t] % page_size, i.e.
row slot_mapping[t] of the cache viewed as [num_blocks * page_size, Hkv * D]. A slot of -1 (a
padding token) writes nothing. Bits are copied (the cache has k's dtype), so every target and
policy stores the same bytes. One program per token, walking Hkv * D in BLOCK chunks.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_tensor
from .configs import select
from .indices import check_range, index_tensor


@kernel
def kv_cache_write_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, HD, skt, svt, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t)
    # a padding slot (-1) writes nothing: its column limit is 0 (one comparison per mask, rather
    # than a tile & a scalar, which the Triton interpreter widens to int32)
    lim = tl.where(slot >= 0, HD, 0)
    dst = slot.to(tl.int64) * HD
    for c0 in range(0, HD, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = cols < lim
        tl.store(kc_ptr + dst + cols, tl.load(k_ptr + t * skt + cols, mask=m), mask=m)
        tl.store(vc_ptr + dst + cols, tl.load(v_ptr + t * svt + cols, mask=m), mask=m)


def _check_new(op, name, t, ref=None):
    check_tensor(op, name, t, dims=3)
    if ref is not None and (t.shape != ref.shape or t.dtype != ref.dtype):
        raise ValueError(f"{op}: {name} is {t.dtype} {tuple(t.shape)}, expected k's {ref.dtype} {tuple(ref.shape)}")
    if t.stride(2) != 1 or t.stride(1) != t.shape[2]:
        t = t.contiguous()
    return t


def _check_cache(op, name, c, k):
    check_tensor(op, name, c, dims=4)
    if c.dtype != k.dtype:
        raise TypeError(f"{op}: argument '{name}' has dtype {c.dtype} but k has {k.dtype}; they must match")
    if tuple(c.shape[2:]) != tuple(k.shape[1:]):
        raise ValueError(f"{op}: {name} has shape {tuple(c.shape)}; expected [num_blocks, page_size, "
                         f"{k.shape[1]}, {k.shape[2]}] (k's kv heads and head_dim)")
    if not c.is_contiguous():
        raise ValueError(f"{op}: argument '{name}' must be contiguous (it is written through a flat slot index)")


def kv_cache_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor, *, config: dict | None = None) -> None:
    """k_cache/v_cache (viewed as [slots, Hkv, D]) rows slot_mapping[t] = k[t] / v[t]; -1 skips."""
    op = "kv_cache_write"
    k = _check_new(op, "k", k)
    v = _check_new(op, "v", v, k)
    _check_cache(op, "k_cache", k_cache, k)
    _check_cache(op, "v_cache", v_cache, k)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"{op}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    slots = index_tensor(op, "slot_mapping", slot_mapping, dims=1)
    if slots.shape[0] != k.shape[0]:
        raise ValueError(f"{op}: slot_mapping has {slots.shape[0]} entries, expected one per token ({k.shape[0]})")
    check_range(op, "slot_mapping", slots, 0, k_cache.shape[0] * k_cache.shape[1], allow=-1)
    check_device(op, k=k, v=v, k_cache=k_cache, v_cache=v_cache, slot_mapping=slots)
    HD = k.shape[1] * k.shape[2]
    if k.shape[0] == 0 or HD == 0:
        return
    cfg = dict(config) if config else select(SPEC, None, row=HD)
    kv_cache_write_kernel[(k.shape[0],)](k, v, k_cache, v_cache, slots, HD, k.stride(0), v.stride(0), **cfg)


def kv_cache_write_ref(k, v, k_cache, v_cache, slot_mapping):
    """The same writes with torch indexing (in place on the given caches)."""
    keep = slot_mapping >= 0
    s = slot_mapping[keep].long()
    kc, vc = k_cache.view(-1, *k_cache.shape[2:]), v_cache.view(-1, *v_cache.shape[2:])
    kc[s], vc[s] = k[keep], v[keep]


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    k = torch.randn(s["tokens"], s["kv_heads"], s["head_dim"], generator=g)
    v = torch.randn(s["tokens"], s["kv_heads"], s["head_dim"], generator=g)
    blocks = cdiv(2 * s["tokens"], s["page_size"])
    slots = torch.randperm(blocks * s["page_size"], generator=g)[: s["tokens"]]
    kc = torch.zeros(blocks, s["page_size"], s["kv_heads"], s["head_dim"])
    vc = torch.zeros_like(kc)

    def run(cfg):
        kv_cache_write(k, v, kc, vc, slots, config=cfg)
        return kc[0, 0].clone()

    def ref():
        a, b = torch.zeros_like(kc), torch.zeros_like(vc)
        kv_cache_write_ref(k, v, a, b, slots)
        return a[0, 0].double()
    return Problem(run=run, ref=ref, eager=lambda: kv_cache_write_ref(k, v, kc.clone(), vc.clone(), slots))


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    k = torch.zeros(2, 2, cfg["BLOCK"], dtype=dt)
    kc = torch.zeros(2, 2, 2, cfg["BLOCK"], dtype=dt)
    kv_cache_write(k, k, kc, kc.clone(), torch.tensor([0, 3], dtype=torch.int32), config=cfg)


SPEC = OpSpec(
    name="kv_cache_write",
    key_dims={"row": "align32"},   # kv heads x head_dim
    space=tuple({"BLOCK": b} for b in (64, 128, 256, 512, 1024, 2048)),
    spaces={"scratchpad": tuple({"BLOCK": b} for b in (64, 128, 256, 512))},
    defaults={"cache": {"BLOCK": 1024}, "scratchpad": {"BLOCK": 512}, "simt": {"BLOCK": 1024}},
    clamp=lambda cfg, dims: {**cfg, "BLOCK": min(cfg["BLOCK"], max(64, npow2(dims["row"])))},
    dims_of=lambda s: {"row": s["kv_heads"] * s["head_dim"]},
    problem=_problem,
    describe=lambda s: f"{s['tokens']} tok x {s['kv_heads']}x{s['head_dim']}, page {s['page_size']}",
    probe=_probe,
    work=lambda cfg, s: Work(programs=s["tokens"], elements=4 * s["kv_heads"] * s["head_dim"],
                             segments=4 * cdiv(s["kv_heads"] * s["head_dim"], cfg["BLOCK"]), flops=0),
    tune_shapes=({"label": "decode batch", "tokens": 64, "kv_heads": 8, "head_dim": 128, "page_size": 16},),
    quick_shapes=({"label": "tiny", "tokens": 4, "kv_heads": 2, "head_dim": 32, "page_size": 4},),
    bit_neutral=frozenset({"BLOCK"}),   # a copy
)
SPECS = (SPEC,)

__all__ = ["kv_cache_write", "kv_cache_write_ref", "kv_cache_write_kernel", "SPEC", "SPECS"]
