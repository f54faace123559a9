"""All-or-nothing publication of many cache entries (an import), and recovery of what a killed
process left under ``<cache>/tmp``.

A publication stages every file under ``tmp/import.<id>.staging/`` (entries under ``entries/<key>/``,
decision files under ``decisions/``) while holding ``tmp/import.<id>.lock``. Once everything is
staged and checked, it writes ``COMMITTED`` (the list of what it publishes) atomically, then renames
each entry into place. A process killed before ``COMMITTED`` leaves a staging directory that the
next run deletes (nothing was published); one killed after it leaves one that the next run
finishes publishing. Either way a cache ends up with all of an import or none of it.

``sweep(cache)`` is that next run: it takes each staging directory whose lock is free (its owner
is gone), and also deletes build directories of killed builders (``<key>.*.build`` whose key lock
is free) and entries left half-deleted (``*.rejected``).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import uuid

from filelock import FileLock, Timeout

from .safety import CacheError

COMMITTED = "COMMITTED"


class Staging:
    """One publication's staging directory (a context manager; the lock is held while open)."""

    def __init__(self, cache, decisions_dir: str) -> None:
        self.cache = cache
        self.decisions = decisions_dir   # decision files' directory under the cache root
        tmp = cache.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        name = f"import.{uuid.uuid4().hex}"
        self.lock = FileLock(str(tmp / f"{name}.lock"))
        self.lock.acquire()
        self.dir = tmp / f"{name}.staging"
        self.dir.mkdir(mode=0o700)

    def entry_dir(self, key: str) -> pathlib.Path:
        d = self.dir / "entries" / key
        d.mkdir(parents=True)
        return d

    def decision_path(self, name: str) -> pathlib.Path:
        d = self.dir / "decisions"
        d.mkdir(exist_ok=True)
        return d / name

    def commit(self) -> dict:
        """Marks the staged contents complete; from here on they are published even if this process dies."""
        entries = sorted(p.name for p in (self.dir / "entries").iterdir()) if (self.dir / "entries").is_dir() else []
        staged = self.dir / "decisions"
        decisions = sorted(p.name for p in staged.iterdir()) if staged.is_dir() else []
        plan = {"entries": entries, "decisions": decisions, "decisions_dir": self.decisions}
        part = self.dir / f".{COMMITTED}.part"
        part.write_text(json.dumps(plan))
        os.replace(part, self.dir / COMMITTED)
        return plan

    def publish(self) -> dict:
        return _publish(self.cache, self.dir)

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        _release(self.lock)


def _release(lock: FileLock) -> None:
    try:
        os.unlink(lock.lock_file)
    except OSError:
        pass
    lock.release()


def _publish(cache, stage: pathlib.Path) -> dict:
    """Phase 2: rename every staged entry and decision file into place (those already present are
    kept). Returns {"imported": [...], "skipped": [...]}."""
    plan = json.loads((stage / COMMITTED).read_text())
    imported, skipped = [], []
    for key in plan["entries"]:
        d = stage / "entries" / key
        if not d.is_dir():
            continue   # published before the process that staged it died
        (imported if cache.publish(key, d) else skipped).append(key)
    sub = plan["decisions_dir"]
    target = cache.root / sub
    for name in plan["decisions"]:
        src = stage / "decisions" / name
        if not src.exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, target / name)   # never replaces: an existing file holds this machine's own results
            imported.append(f"{sub}/{name}")
        except FileExistsError:
            skipped.append(f"{sub}/{name}")
        os.unlink(src)
    return {"imported": imported, "skipped": skipped}


def sweep(cache) -> list[str]:
    """Cleans up after killed processes (see the module doc); returns what it did, one line each."""
    tmp = cache.root / "tmp"
    if not tmp.is_dir():
        return []
    done = []
    for p in sorted(tmp.iterdir()):
        name = p.name
        if name.endswith(".rejected"):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {name}")
        elif name.startswith("import.") and name.endswith(".staging"):
            done += _recover_staging(cache, p)
        elif name.endswith(".build") and "." in name:
            key = name.split(".", 1)[0]
            try:
                with cache.lock(key, blocking=False):
                    shutil.rmtree(p, ignore_errors=True)
                    done.append(f"removed {name}")
            except (Timeout, CacheError):
                pass   # a build in progress, or a read-only cache
    return done


def _recover_staging(cache, stage: pathlib.Path) -> list[str]:
    lock = FileLock(str(stage.with_suffix(".lock")))
    try:
        lock.acquire(blocking=False)
    except Timeout:
        return []   # its import is still running
    try:
        if not stage.exists():
            return []
        if (stage / COMMITTED).exists():
            try:
                res = _publish(cache, stage)
                msg = f"finished the interrupted import {stage.name}: {len(res['imported'])} published"
            except (OSError, ValueError, CacheError) as exc:
                msg = f"could not finish the interrupted import {stage.name} ({exc}); removed it"
        else:
            msg = f"removed the staging of an interrupted import {stage.name} (nothing of it was published)"
        shutil.rmtree(stage, ignore_errors=True)
        return [msg]
    finally:
        _release(lock)
