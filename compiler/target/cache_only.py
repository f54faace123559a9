"""A target whose toolchain is missing here still runs the kernels of the kernel cache.

A cache key hashes the target's fingerprint, and the fingerprint names the toolchain that built
the binaries (the C++ compiler's version, for cpu and for Kunlun's host emulation). A machine
without that toolchain (a slim deployment image with an imported cache) cannot ask it for its
version, so it takes the toolchain fields from the entries built for this target whose other
fields (flags, ISA, the target's own sources, ...) match this machine's: those are the binaries
it can load. Where several toolchains built such entries, the one that built the most wins.
A build still needs the toolchain: it fails with the target's `cannot_build()` reason.
"""
from __future__ import annotations

import json

from ..cache.store import KernelCache

_ADOPTED: dict[tuple, dict] = {}


def adopt_fingerprint(own: dict, unknown: tuple[str, ...], cache: KernelCache | None = None) -> dict:
    """`own` (this machine's fingerprint, with None in the `unknown` fields) completed from the
    fingerprints recorded by the cache's entries, or `own` unchanged when no entry matches."""
    cache = cache if cache is not None else KernelCache()
    memo = (str(cache.root), json.dumps(own, sort_keys=True, default=str), unknown)
    hit = _ADOPTED.get(memo)
    if hit is not None:
        return hit
    counts: dict[str, int] = {}
    for _key, meta in cache.manifests():
        fp = meta.get("fingerprint")
        if not isinstance(fp, dict) or set(fp) != set(own):
            continue
        if all(_same(fp[k], own[k]) for k in own if k not in unknown) and all(fp[k] is not None for k in unknown):
            text = json.dumps({k: fp[k] for k in unknown}, sort_keys=True)
            counts[text] = counts.get(text, 0) + 1
    if not counts:
        return own   # not remembered: a cache imported later in this process is seen
    best = max(counts, key=lambda t: (counts[t], t))
    _ADOPTED[memo] = out = {**own, **json.loads(best)}
    return out


def _same(a, b) -> bool:
    # fingerprints come back from JSON: tuples are lists there
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
