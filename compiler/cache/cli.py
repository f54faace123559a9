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
from .select import Selection, parse_since
from .store import LAUNCH_PATH, BadEntry, KernelCache
from .usage import read_manifest

__all__ = ["main"]

LAUNCH_PATH_ROW = "launch-path"   # the compiled launch path's module, in `ls`/`stats`/`import` (every target's)


def _size(path: pathlib.Path) -> int:
    total = 0
    for p in path.iterdir():
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_size
    return total


def _rows(cache: KernelCache) -> list[dict]:
    rows = []
    for e in cache.entries():
        rows.append({"key": e.key, "kernel": e.meta.get("kernel"), "target": _target_of(e.meta),
                     "specialization": e.meta.get("specialization"), "policy": e.meta.get("policy"),
                     "op": e.meta.get("op"),
                     "size": _size(e.path), "created": cache.created(e.key)})
    return rows


def _target_of(meta: dict) -> str:
    """The entry's target; the compiled launch path's module (no target: it serves every one)
    is listed under its own name."""
    t = meta.get("target")
    if t:
        return str(t)
    return LAUNCH_PATH_ROW if meta.get("kernel") == LAUNCH_PATH else "unknown"


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
    print(f"{'KEY':<14} {'TARGET':<12} {'SIZE':>10}  {'CREATED':<19}  KERNEL (SPECIALISATION; POLICY, OP)")
    for r in sorted(rows, key=lambda r: r["created"]):
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"]))
        what = r["specialization"] or r["kernel"] or "-"
        extra = ", ".join(x for x in (r.get("policy"), r.get("op") and f"op {r['op']}") if x)
        print(f"{r['key'][:12]:<14} {r['target']:<12} {_human(r['size']):>10}  {created:<19}  {what}"
              + (f" ({extra})" if extra else ""))
    print(f"{len(rows)} entries in {cache.root}")
    return 0


def cmd_stats(cache: KernelCache, args) -> int:
    rows = _rows(cache)
    per: dict[str, dict] = {}
    for r in rows:
        t = per.setdefault(r["target"], {"count": 0, "bytes": 0, "kernels": set()})
        t["count"] += 1
        t["bytes"] += r["size"]
        t["kernels"].add(r["kernel"])
    bad = sum(1 for _ in cache.entry_dirs()) - len(rows)
    decisions = DecisionStore(cache.root)
    out = {"cache_dir": str(cache.root), "count": len(rows), "bytes": sum(r["size"] for r in rows),
           "bad": bad, "targets": {k: {"count": v["count"], "bytes": v["bytes"], "kernels": len(v["kernels"])}
                                   for k, v in per.items()},
           "decision_files": len(decisions.files())}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"cache dir: {cache.root}")
    print(f"entries:   {out['count']} ({_human(out['bytes'])}), {bad} invalid")
    print(f"decisions: {out['decision_files']} files in {decisions.dir}")
    for name, t in sorted(per.items()):
        what = ("the compiled launch path's module (every target's launches)" if name == LAUNCH_PATH_ROW else
                f"{len(t['kernels'])} kernels")
        print(f"  {name:<12} {t['count']:>6} entries  {_human(t['bytes']):>10}  {what}")
    return 0


def _counted(entries: int, decisions: int) -> str:
    """One wording for every command: kernel entries and decision files, counted apart."""
    return f"{entries} kernel entries and {decisions} decision files"


def _selection(args) -> Selection:
    def listed(values):
        return tuple(v.strip() for item in values or () for v in item.split(",") if v.strip())
    keys = decisions = None
    if args.keys:
        try:
            k, d = read_manifest(args.keys)
        except OSError as exc:
            raise CacheError(f"--keys {args.keys}: {exc}") from None
        keys, decisions = frozenset(k), frozenset(d)
    return Selection(targets=listed(args.target), kernels=listed(args.kernel), ops=listed(args.op),
                     since=parse_since(args.since) if args.since else None, keys=keys, decisions=decisions)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _counted_apart(pairs, decisions: int) -> str:
    """"12 kernel entries (cpu 10, kunlun:xpu3 2), 3 decision files and the compiled launch path's
    module" from the (target, kernel) of each entry."""
    count: dict[str, int] = {}
    launch_path = False
    for target, kernel in pairs:
        if not target and kernel == LAUNCH_PATH:
            launch_path = True
            continue
        count[target or "unknown"] = count.get(target or "unknown", 0) + 1
    text = _plural(sum(count.values()), "kernel entry").replace("entrys", "entries")
    if count:
        text += " (" + ", ".join(f"{t} {n}" for t, n in sorted(count.items())) + ")"
    text += (", " if launch_path else " and ") + _plural(decisions, "decision file")
    return text + (" and the compiled launch path's module" if launch_path else "")


def cmd_export(cache: KernelCache, args) -> int:
    select = _selection(args)
    man = export_cache(cache, args.archive, select)
    ents = man["entries"]
    print(f"exported {_counted_apart(((e['target'], e['kernel']) for e in ents.values()), len(man['decisions']))} "
          f"to {args.archive} (selected: {select.describe()})")
    left = man["left_out"]
    if left["entries"] or left["decisions"]:
        print(f"left out: {_plural(left['entries'], 'entry').replace('entrys', 'entries')} and "
              f"{_plural(left['decisions'], 'decision file')} the selection does not take")
    if select.keys is not None:
        missing = sorted(select.keys - set(ents))
        if missing:
            print(f"warning: {len(missing)} keys the --keys file lists are not in {cache.root} "
                  f"(e.g. {missing[0][:16]}): the archive lacks them", file=sys.stderr)
    return 0


def cmd_import(cache: KernelCache, args) -> int:
    res = import_cache(cache, args.archive, force=args.force)
    for p in res["problems"]:
        print(f"warning (--force): {p}", file=sys.stderr)
    for u in res["unchecked"]:
        print(f"note: {u}", file=sys.stderr)
    ents = res["entries"]
    if args.verbose:   # what happened to each kernel (grouped by name) and decision file
        groups: dict[tuple, list[int]] = {}   # (target, kernel) -> [new, already there]
        for i, keys in enumerate((res["imported"], res["skipped"])):
            for key in keys:
                groups.setdefault(ents[key], [0, 0])[i] += 1
        for (target, kernel), (new, kept) in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            name = target or (LAUNCH_PATH_ROW if kernel == LAUNCH_PATH else "unknown")
            what = ", ".join(x for x in (new and f"{new} new", kept and f"{kept} already there (kept)") if x)
            print(f"  {name:<12} {kernel or '-':<32} {what}")
        for name in res["decisions_imported"]:
            print(f"  {'decisions':<12} {name.split('/', 1)[1]:<32} new")
        for name in res["decisions_skipped"]:
            print(f"  {'decisions':<12} {name.split('/', 1)[1]:<32} already there, kept (this cache's own results)")
    line = f"imported {_counted_apart((ents[k] for k in res['imported']), len(res['decisions_imported']))} " \
           f"into {cache.root}"
    if res["skipped"] or res["decisions_skipped"]:
        line += (f"; already there, kept: "
                 f"{_counted_apart((ents[k] for k in res['skipped']), len(res['decisions_skipped']))}")
    print(line + ("" if args.verbose else " (-v: each kernel)"))
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
    s = sub.add_parser("export", parents=[common], help="write the valid entries (all, or a selection) to one .tar.gz",
                       description="Every criterion given must hold; none given exports everything. "
                                   "See docs/deployment.md.")
    s.add_argument("archive")
    s.add_argument("--target", action="append", metavar="T", help="entries and decisions of target T (cpu, kunlun: "
                                                                  "every arch, kunlun:xpu3); repeat or comma-separate")
    s.add_argument("--kernel", action="append", metavar="NAME", help="entries of kernels so named (a glob: rms_norm*)")
    s.add_argument("--op", action="append", metavar="OP", help="a library op's decision files and the kernels "
                                                             "built for it")
    s.add_argument("--since", metavar="WHEN", help="built or written since: 90m, 12h, 7d, 2w or an ISO date")
    s.add_argument("--keys", metavar="FILE", help="exactly what a process used: the file TILEJIT_CACHE_RECORD=FILE "
                                                "wrote (or one key per line)")
    s.set_defaults(func=cmd_export)
    s = sub.add_parser("import", parents=[common], help="verify an archive and add its entries")
    s.add_argument("archive")
    s.add_argument("--force", action="store_true", help="import despite a version/target mismatch")
    s.add_argument("-v", "--verbose", action="store_true", help="what happened to each kernel and decision file")
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
