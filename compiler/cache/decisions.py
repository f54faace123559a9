"""The autotuner's decisions: per-config results and the winner, on disk beside the kernel entries.

Layout (under the kernel cache root, ``default_cache_dir()`` unless given)::

    autotune/<op>.<target>.<fingerprint hash[:16]>.<policy>.json     one file per (op, target, policy)
    autotune/locks/<same name>.lock                                    its flock

A file holds ``{"format", "op", "target", "fingerprint_hash", "policy", "entries"}``; ``entries`` maps
a shape key (``"N=4096,K=4096"``) to ``{"shape", "results", "winner", "winner_config",
"winner_time_s", "estimated", "baseline"}``, and ``results`` maps a config key (``"BLOCK_K=128,BLOCK_M=64"``)
to ``{"config", "status": ok|rejected|pruned, "time_s", "estimated", "reason", "at"}``.

Measured results are timed in pairs with a reference (the baseline, else the first candidate:
compiler/autotune/timing.py) and carry ``ratio`` (t_candidate / t_reference of the fastest samples),
``ratio_spread`` (how far the odd and the even pairs disagree on it), ``ratio_median`` (the median
of the per-pair ratios) and ``ref``. The winner is the lowest ratio, except where the entry names a
``baseline`` (the library op's default config): a candidate displaces it only when faster by more
than its ratio's spread (and at least MIN_GAIN) and its median ratio agrees, so a loaded machine
leaves the default in place instead of storing whichever sample happened to be low. Results stored
before paired timing (no ``ratio``) are compared by ``time_s`` and both spreads; the autotuner
measures them again.

Writes take the file's lock, re-read the file, merge the new per-config results into what is
there (results of other configs and other shape keys are kept), recompute the winner and replace
the file atomically (temp file + ``os.replace``), so concurrent tuners never lose each other's
results and readers never see a torn file. Reads take no lock.
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time

from filelock import FileLock

from ..opspec import config_problem
from . import usage
from .keys import stable_hash
from .safety import CacheError, log, strict_mode
from .store import default_cache_dir

FORMAT = 1
SUBDIR = "autotune"
MIN_GAIN = 0.05   # a measured candidate must beat the baseline by more than this fraction
_warned: set = set()   # (file or op, problem) already warned about in this process: one warning each


def config_key(config: dict) -> str:
    return ",".join(f"{k}={config[k]}" for k in sorted(config))


_FP_HASHES: dict[int, tuple[object, str]] = {}


def fingerprint_hash(target) -> str:
    """stable_hash of the target's fingerprint, computed once per target object."""
    hit = _FP_HASHES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _FP_HASHES[id(target)] = (target, stable_hash(json.loads(json.dumps(target.fingerprint()))))
    return hit[1]


class DecisionStore:
    def __init__(self, root=None) -> None:
        root = pathlib.Path(root).expanduser() if root is not None else default_cache_dir()
        self.root = root.absolute()
        self.dir = self.root / SUBDIR

    def files(self) -> list[pathlib.Path]:
        """The decision files in this store (plain files named like ``path()``'s, no links)."""
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.glob("*.json") if p.is_file() and not p.is_symlink())

    def clear(self) -> int:
        """Delete every decision file; returns how many. ``locks/`` is kept, as in KernelCache.clear."""
        n = 0
        for p in self.files():
            try:
                p.unlink()
                n += 1
            except FileNotFoundError:
                pass
        clear_memo()
        return n

    def path(self, op: str, target_name: str, fp_hash: str, policy: str) -> pathlib.Path:
        safe_target = target_name.replace(":", "_").replace("/", "_")
        return self.dir / f"{op}.{safe_target}.{fp_hash[:16]}.{policy}.json"

    def read(self, op, target_name, fp_hash, policy) -> dict:
        """The file's contents; an empty document when it is missing, and also, with one warning
        naming the file, when it cannot be read, does not parse or is not a decision document (a
        JSON list, null, a number, ...): the op then runs its default configs, and the next tune
        of the op replaces the file."""
        p = self.path(op, target_name, fp_hash, policy)
        doc, problem = load_document(p)
        if problem is None:
            return doc
        if problem and (str(p), problem) not in _warned:
            _warned.add((str(p), problem))
            log.warning("tilejit: ignoring the autotune decision file %s: %s. Op %r runs its default configs; the "
                        "next tune of it replaces the file (`python -m compiler.autotune --kernels %s`).",
                        p, problem, op, op)
        return {"format": FORMAT, "op": op, "target": target_name, "fingerprint_hash": fp_hash,
                "policy": policy, "entries": {}}

    def results(self, op, target_name, fp_hash, policy, shape_key) -> dict:
        return _entry(self.read(op, target_name, fp_hash, policy), shape_key, {})["results"]

    def record(self, op, target_name, fp_hash, policy, shape_key, shape: dict, results: dict,
               space_keys=None, baseline: str | None = None) -> dict:
        """Merge ``results`` (config key -> result) into the entry for ``shape_key``; return the entry.
        ``baseline``: the config key that stays the winner unless clearly beaten (module docstring)."""
        p = self.path(op, target_name, fp_hash, policy)
        try:
            entry = self._record(p, op, target_name, fp_hash, policy, shape_key, shape, results, space_keys, baseline)
        except OSError as exc:   # a full disk, a read-only cache: the run's measurements cannot be kept
            raise CacheError(f"cannot store the autotune decisions of op {op!r} in {self.dir} ({exc}); the results "
                             "of this run are not kept. Free space there, or point TILEJIT_CACHE_DIR (or "
                             "--cache-dir) at a writable directory, and tune again") from exc
        clear_memo()   # lookups in this process see the new decision
        return entry

    def _record(self, p, op, target_name, fp_hash, policy, shape_key, shape, results, space_keys, baseline) -> dict:
        (self.dir / "locks").mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dir / "locks" / (p.name + ".lock"))):
            doc = self.read(op, target_name, fp_hash, policy)
            entry = _entry(doc, shape_key, shape)
            entry["results"].update(results)
            if baseline is not None:
                entry["baseline"] = baseline
            _pick_winner(entry, space_keys)
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=self.dir)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(doc, f, indent=1, sort_keys=True, allow_nan=False)
                os.chmod(tmp, 0o644)
                os.replace(tmp, p)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        return entry


_JSON_TYPES = {dict: "a JSON object", list: "a JSON array", str: "a JSON string", int: "a JSON number",
               float: "a JSON number", bool: "JSON true/false", type(None): "JSON null"}


def load_document(path) -> tuple[dict | None, str | None]:
    """(the decision document in file `path`, None), or (None, why it is not one): '' when the
    file does not exist, else a sentence (unreadable, empty, not JSON, the wrong JSON shape)."""
    try:
        raw = pathlib.Path(path).read_bytes()
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"it cannot be read ({exc.strerror or exc})"
    if not raw.strip():
        return None, "it is empty"
    try:
        doc = json.loads(raw)
    except ValueError as exc:   # UnicodeDecodeError included
        return None, f"it is not valid JSON ({exc})"
    if not isinstance(doc, dict):
        return None, (f"it holds {_JSON_TYPES.get(type(doc), type(doc).__name__)}, not a decision document "
                      f"(a JSON object with format {FORMAT} and 'entries')")
    if doc.get("format") != FORMAT or not isinstance(doc.get("entries"), dict):
        return None, f"it is not a decision document of format {FORMAT} with 'entries'"
    return doc, None


def _result_ok(r) -> bool:
    """Whether stored result `r` has the shape the winner's choice reads (hand edits may not)."""
    if not isinstance(r, dict) or not isinstance(r.get("config"), dict):
        return False
    t = r.get("time_s")
    return t is None or (isinstance(t, (int, float)) and not isinstance(t, bool))


def _entry(doc: dict, shape_key: str, shape) -> dict:
    """The entry for `shape_key` in `doc`, made whole: a missing or malformed entry becomes an
    empty one, and results of the wrong shape are dropped (a tune measures those configs again)."""
    entry = doc["entries"].get(shape_key)
    if not isinstance(entry, dict) or not isinstance(entry.get("results"), dict):
        entry = doc["entries"][shape_key] = {"shape": shape, "results": {}}
    entry["results"] = {k: r for k, r in entry["results"].items() if _result_ok(r)}
    return entry


def winner_of(results: dict, baseline: str | None, space_keys=None) -> str | None:
    """The config key `record` would make the winner of these results (config key -> result)."""
    entry = {"results": results, "baseline": baseline}
    _pick_winner(entry, space_keys)
    return entry["winner"]


def _pick_winner(entry: dict, space_keys=None) -> None:
    ok = [(k, r) for k, r in entry["results"].items()
          if r.get("status") == "ok" and r.get("time_s") is not None and (space_keys is None or k in space_keys)]
    measured = [kr for kr in ok if not kr[1].get("estimated")]
    pool = measured or ok
    if not pool:
        entry.update(winner=None, winner_config=None, winner_time_s=None, estimated=False)
        return
    paired = _paired(pool, entry.get("baseline"))
    if paired:
        k, r = _by_ratio(paired, entry.get("baseline"))
    else:
        k, r = _by_time(pool, entry.get("baseline"))
    entry.update(winner=k, winner_config=r["config"], winner_time_s=r["time_s"], estimated=bool(r.get("estimated")))


def _paired(pool: list, baseline: str | None) -> list:
    """The results timed in pairs with one reference (the baseline when given, else the reference
    most of them share), the reference's own included; [] when there are none."""
    refs = [r.get("ref") for _, r in pool if r.get("ratio") is not None and r.get("ref")]
    if not refs:
        return []
    ref = baseline if baseline in refs else max(set(refs), key=refs.count)
    return [(k, r) for k, r in pool if r.get("ref") == ref and r.get("ratio") is not None]


def _by_ratio(paired: list, baseline: str | None):
    """The lowest ratio to the reference; a baseline is displaced only by a candidate faster by more
    than that ratio's spread (and at least MIN_GAIN), whose median per-pair ratio agrees."""
    k, r = min(paired, key=lambda kr: (kr[1]["ratio"], "same_as" in kr[1], kr[0]))
    base = dict(paired).get(baseline)
    if base is not None and k != baseline:
        margin = max(MIN_GAIN, r.get("ratio_spread") or 0.0)
        if r["ratio"] * (1 + margin) >= base["ratio"] or r.get("ratio_median", 0.0) >= base["ratio"]:
            return baseline, base
    return k, r


def _by_time(pool: list, baseline: str | None):
    """Results from before paired timing (and estimates): the lowest time; a baseline is displaced
    only by a candidate faster by more than both spreads (and at least MIN_GAIN)."""
    # ties (candidates that launch the same config share a result): prefer the one measured as itself
    k, r = min(pool, key=lambda kr: (kr[1]["time_s"], "same_as" in kr[1], kr[0]))
    base = dict(pool).get(baseline)
    if base is not None and not r.get("estimated") and not base.get("estimated"):
        margin = max(MIN_GAIN, r.get("spread") or 0.0, base.get("spread") or 0.0)
        if r["time_s"] * (1 + margin) >= base["time_s"]:
            return baseline, base
    return k, r


def result(config: dict, status: str, time_s=None, reason=None, estimated=False, **extra) -> dict:
    return {"config": dict(config), "status": status, "time_s": time_s, "reason": reason,
            "estimated": estimated, "at": time.time(), **extra}


# ------------------------------------------------------------------ run-time lookup (cheap, memoised)
_MEMO: dict[tuple, dict] = {}
_GENERATION = [0]


def clear_memo() -> None:
    """Forget what lookups have read (a later lookup re-reads the store files); callers that
    memoise decisions themselves compare `generation()`."""
    _MEMO.clear()
    _GENERATION[0] += 1


def generation() -> int:
    """A counter that changes whenever a decision may have changed in this process."""
    return _GENERATION[0]


def _spec(op):
    """The op's spec, when an installed op library declares it (None otherwise)."""
    from ..opspec import library_ops  # noqa: PLC0415 - loads the op libraries on first use
    try:
        return library_ops().get(op)
    except Exception:  # noqa: BLE001 - a broken library must not break reading decisions
        return None


def config_problem_for(op, config) -> str | None:
    """Why `config` could not run op `op` (the op's own rule when its spec is installed)."""
    spec = _spec(op)
    return spec.config_problem(config) if spec is not None else config_problem(config)


def validate_document(doc) -> list[str]:
    """The problems of a decision document: its shape, and every winning or measured config."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("entries"), dict):
        return [f"it is not a decision document of format {FORMAT} with 'entries'"]
    op, out = doc.get("op"), []
    for shape_key, e in doc["entries"].items():
        if not isinstance(e, dict):
            out.append(f"shape {shape_key}: not an object")
            continue
        results = e.get("results") if isinstance(e.get("results"), dict) else {}
        cfgs = [e.get("winner_config")] + [r.get("config") for r in results.values()
                                           if isinstance(r, dict) and r.get("status") == "ok"]
        for cfg in cfgs:
            why = None if cfg is None else config_problem_for(op, cfg)
            if why:
                out.append(f"op {op!r}, shape {shape_key}: config {cfg}: {why}")
    return out


def lookup(op: str, target, policy: str, shape_key: str, root=None):
    """The winning config for (op, target fingerprint, policy, shape key), or None. Each store
    file is read once per process (then served from memory; ``clear_memo()`` forgets it). A
    winner that could not run (BLOCK_M=0, a missing parameter: a file edited or planted by hand)
    is ignored with a warning naming the file, so the op runs its default config instead."""
    fp = fingerprint_hash(target)
    fast_key = (root, os.environ.get("TILEJIT_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"), op, target.name, fp, policy)
    table = _MEMO.get(fast_key)
    if table is None:
        store = DecisionStore(root)
        doc = store.read(op, target.name, fp, policy)
        if doc["entries"]:   # TILEJIT_CACHE_RECORD lists the decision files a process used
            usage.note_decisions(store.path(op, target.name, fp, policy).name)
        table = {}
        for k, e in doc["entries"].items():
            if not isinstance(e, dict):
                why, cfg = f"the entry holds {_JSON_TYPES.get(type(e), type(e).__name__)}, not an object", None
            else:
                cfg = e.get("winner_config")
                if not cfg:
                    continue
                why = config_problem_for(op, cfg)
            if why is None:
                table[k] = cfg
            elif (op, k, str(cfg), why) not in _warned:
                _warned.add((op, k, str(cfg), why))
                what = f"config {cfg}: {why}" if cfg is not None else why
                log.warning("tilejit: ignoring the tuned decision for op %r, shape %s in %s: %s. The op runs "
                            "its default config; the next tune of it replaces the decision (`python -m "
                            "compiler.autotune --kernels %s`).", op, k, store.path(op, target.name, fp, policy),
                            what, op)
        _MEMO[fast_key] = table
    cfg = table.get(shape_key)
    return dict(cfg) if cfg is not None else None


def lookup_or_default(op: str, target, policy: str, shape_key: str):
    """``lookup``; on a miss None, or a CacheError in strict-cache mode naming op and shape key."""
    cfg = lookup(op, target, policy, shape_key)
    if cfg is None and strict_mode():
        raise CacheError(
            f"TILEJIT_CACHE_STRICT=1: no tuned config for op {op!r}, shape key {shape_key} (target "
            f"{target.name}, policy {policy}) in {DecisionStore().dir}; run `python -m compiler.autotune "
            f"--target {target.name.split(':')[0]} --kernels {op}` with this shape, or import a cache that has it")
    return cfg
