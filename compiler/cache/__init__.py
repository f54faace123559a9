"""The kernel cache: content-addressed compiled kernels and the autotuner's decisions, on disk,
safe for concurrent processes, shippable as one archive.

    store.py      KernelCache: entries (artifacts + sha256 manifest), published by rename, a lock per key
    keys.py       stable_hash: the canonical-JSON sha256 every cache key is built with; cache_key: what a
                  compiled kernel's key is made of (IR, target fingerprint, policy, compiler sources)
    safety.py     strict (no-compile) mode, refusal of directories other users can write to
    decisions.py  DecisionStore: per-config autotune results and winners, under <root>/autotune/
    unwritable.py where a build goes when the cache cannot take it (a full disk, a read-only directory)
    archive.py    export / import of a cache (entries and decisions) as one .tar.gz
    select.py     what an export takes (--target, --kernel, --op, --since, --keys)
    usage.py      the entries and decision files a process used (TILEJIT_CACHE_RECORD)
    cli.py        `python -m compiler.cache {ls, stats, export, import, verify, prune, clear}`
"""
from .decisions import DecisionStore
from .keys import cache_key, stable_hash
from .safety import CacheError, CacheMissError, check_dir_safety, strict_mode
from .store import STATS, CacheEntry, KernelCache, compiler_tmpdir, default_cache_dir

__all__ = ["KernelCache", "CacheEntry", "CacheError", "CacheMissError", "DecisionStore", "STATS", "stable_hash",
           "cache_key", "default_cache_dir", "strict_mode", "check_dir_safety", "compiler_tmpdir"]
