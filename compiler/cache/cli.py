"""`python -m compiler.cache {ls, stats, export, import, verify, prune, clear} [--cache-dir DIR]`.

The default directory is ``$TILEJIT_CACHE_DIR``, else the platform default (see
``compiler.cache.store.default_cache_dir``). Exit status: 0 on success, 1 when ``verify`` found bad
entries or decision files that are not decision documents (even if ``--delete`` removed them), 2 on
an error (message on stderr).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

from .archive import export_cache, import_cache
from .decisions import DecisionStore, load_document
from .safety import CacheError
from .store import MANIFEST, BadEntry, KernelCache

__all__ = ["main"]


def _size(path: pathlib.Path) -> int:
    total = 0
    for p in path.iterdir():
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_size
    return total


def _created(path: pathlib.Path) -> float:
    try:
        return os.stat(path / MANIFEST).st_mtime
    except OSError:
        return os.lstat(path).st_mtime


def _rows(cache: KernelCache) -> list[dict]:
    rows = []
    for e in cache.entries():
        rows.append({"key": e.key, "kernel": e.meta.get("kernel"), "target": e.meta.get("target"),
                     "size": _size(e.path), "created": _created(e.path)})
    return rows


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_ls(cache: KernelCache, args) -> int:
    rows = _rows(cache)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'KEY':<14} {'KERNEL':<28} {'TARGET':<12} {'SIZE':>10}  CREATED")
    for r in sorted(rows, key=lambda r: r["created"]):
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"]))
        print(f"{r['key'][:12]:<14} {str(r['kernel'] or '-'):<28} {str(r['target'] or '-'):<12} "
              f"{_human(r['size']):>10}  {created}")
    print(f"{len(rows)} entries in {cache.root}")
    return 0


def cmd_stats(cache: KernelCache, args) -> int:
    rows = _rows(cache)
    per: dict[str, dict] = {}
    for r in rows:
        t = per.setdefault(str(r["target"] or "-"), {"count": 0, "bytes": 0})
        t["count"] += 1
        t["bytes"] += r["size"]
    bad = sum(1 for _ in cache.entry_dirs()) - len(rows)
    decisions = DecisionStore(cache.root)
    out = {"cache_dir": str(cache.root), "count": len(rows), "bytes": sum(r["size"] for r in rows),
           "bad": bad, "targets": per, "decision_files": len(decisions.files())}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"cache dir: {cache.root}")
    print(f"entries:   {out['count']} ({_human(out['bytes'])}), {bad} invalid")
    print(f"decisions: {out['decision_files']} files in {decisions.dir}")
    for name, t in sorted(per.items()):
        print(f"  {name:<12} {t['count']:>6} entries  {_human(t['bytes']):>10}")
    return 0


def _counted(entries: int, decisions: int) -> str:
    """One wording for every command: kernel entries and decision files, counted apart."""
    return f"{entries} kernel entries and {decisions} decision files"


def cmd_export(cache: KernelCache, args) -> int:
    man = export_cache(cache, args.archive)
    print(f"exported {_counted(len(man['entries']), len(man.get('decisions', {})))} "
          f"(targets: {', '.join(sorted(man['targets'])) or 'none'}) to {args.archive}")
    return 0


def cmd_import(cache: KernelCache, args) -> int:
    res = import_cache(cache, args.archive, force=args.force)
    for p in res["problems"]:
        print(f"warning (--force): {p}", file=sys.stderr)
    for u in res["unchecked"]:
        print(f"note: {u}", file=sys.stderr)
    print(f"imported {_counted(len(res['imported']), len(res['decisions_imported']))} into {cache.root} "
          f"(already present, kept: {_counted(len(res['skipped']), len(res['decisions_skipped']))})")
    return 0


def _fix(exc: Exception, args) -> str:
    """What to do about a bad entry (a CacheError about unsafe permissions says so itself)."""
    if isinstance(exc, CacheError):
        return ""
    return (f"; fix: `python -m compiler.cache verify --delete{_dir_opt(args)}` removes it, and the kernel is "
            "rebuilt on its next launch (or re-import the archive it came from)")


def _dir_opt(args) -> str:
    return f" --cache-dir {args.cache_dir}" if args.cache_dir else ""


def cmd_verify(cache: KernelCache, args) -> int:
    good = bad = 0
    for line in cache.sweep_stale(force=True):
        print(f"swept: {line}")
    for key, _d in cache.entry_dirs():
        try:
            cache.verify(key)
        except (BadEntry, CacheError) as exc:
            bad += 1
            if args.delete:
                action = " (deleted; rebuilt on next use)" if cache.remove(key) else \
                    " (busy, not deleted: another process holds its lock; run verify --delete again)"
            else:
                action = _fix(exc, args)
            print(f"BAD  {key}: {exc}{action}")
        else:
            good += 1
    print(f"{good} ok, {bad} bad in {cache.root}")
    bad_files = _verify_decisions(cache, args)
    return 1 if bad or bad_files else 0


def _verify_decisions(cache: KernelCache, args) -> int:
    """Reports each decision file that is not a decision document (the ops ignore such a file
    and the next tune replaces it); with --delete removes it. Returns how many were bad."""
    store = DecisionStore(cache.root)
    files = store.files()
    bad = 0
    for p in files:
        _doc, problem = load_document(p)
        if not problem:
            continue
        bad += 1
        if args.delete:
            p.unlink(missing_ok=True)
            action = " (deleted; the next tune writes it again)"
        else:
            action = (f"; its ops run their default configs until the next tune replaces it, or `python -m "
                      f"compiler.cache verify --delete{_dir_opt(args)}` removes it")
        print(f"BAD  decision file {p.name}: {problem}{action}")
    if files:
        print(f"decision files: {len(files) - bad} ok, {bad} bad in {store.dir}")
    return bad


def cmd_prune(cache: KernelCache, args) -> int:
    if args.older_than is None and args.max_bytes is None:
        raise CacheError("prune needs --older-than DAYS and/or --max-bytes N")
    rows = sorted(_rows(cache), key=lambda r: r["created"])  # oldest first
    doomed = []
    if args.older_than is not None:
        cutoff = time.time() - args.older_than * 86400
        doomed = [r for r in rows if r["created"] < cutoff]
        rows = [r for r in rows if r["created"] >= cutoff]
    if args.max_bytes is not None:
        total = sum(r["size"] for r in rows)
        while rows and total > args.max_bytes:
            r = rows.pop(0)
            total -= r["size"]
            doomed.append(r)
    removed = freed = 0
    for r in doomed:
        if cache.remove(r["key"]):
            removed += 1
            freed += r["size"]
    print(f"pruned {removed} entries ({_human(freed)}) from {cache.root}")
    return 0


def cmd_clear(cache: KernelCache, args) -> int:
    n = sum(1 for _ in cache.entry_dirs())
    cache.clear()
    store = DecisionStore(cache.root)
    if args.keep_decisions:
        print(f"cleared {n} kernel entries from {cache.root} "
              f"(kept {len(store.files())} decision files in {store.dir}: --keep-decisions)")
    else:
        print(f"cleared {_counted(n, store.clear())} from {cache.root}")
    return 0


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=None,
                        help="cache directory (default: $TILEJIT_CACHE_DIR, else ~/.cache/tilejit)")
    p = argparse.ArgumentParser(prog="python -m compiler.cache", description="Inspect and ship the tilejit kernel cache.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ls", parents=[common], help="list entries")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_ls)
    s = sub.add_parser("stats", parents=[common], help="count and size, per target")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)
    s = sub.add_parser("export", parents=[common], help="write all valid entries to one .tar.gz")
    s.add_argument("archive")
    s.set_defaults(func=cmd_export)
    s = sub.add_parser("import", parents=[common], help="verify an archive and add its entries")
    s.add_argument("archive")
    s.add_argument("--force", action="store_true", help="import despite a version/target mismatch")
    s.set_defaults(func=cmd_import)
    s = sub.add_parser("verify", parents=[common], help="re-hash every entry and read every decision file")
    s.add_argument("--delete", action="store_true", help="delete bad entries")
    s.set_defaults(func=cmd_verify)
    s = sub.add_parser("prune", parents=[common], help="delete old entries / shrink to a size")
    s.add_argument("--older-than", type=float, metavar="DAYS")
    s.add_argument("--max-bytes", type=int, metavar="N")
    s.set_defaults(func=cmd_prune)
    s = sub.add_parser("clear", parents=[common], help="delete every kernel entry and the autotuner's decisions")
    s.add_argument("--keep-decisions", action="store_true", help="keep the autotuner's decisions (autotune/*.json)")
    s.set_defaults(func=cmd_clear)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache = KernelCache(args.cache_dir)
    try:
        return args.func(cache, args)
    except CacheError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
