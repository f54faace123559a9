"""Content-addressed, multi-process-safe store for compiled kernels.

Layout under ``root``::

    <key[:2]>/<key>/            one entry: artifact files + manifest.json
    tmp/<key>.<random>.build    in-progress builds (same filesystem, so publishing is a rename)
    locks/<key>.lock            one flock file per key

Invariants the design relies on:

* An entry directory only ever appears through ``os.rename`` of a complete temp directory whose
  manifest was written last, so readers need no lock: they see a whole entry or none.
* Entries are immutable once published; only an entry that fails verification is ever replaced,
  and only by a holder of the key's lock (it is renamed aside first, then deleted).
* Every disk entry is verified (manifest key + sha256 of every listed file) before use, so a
  crash, partial copy or power loss at any point yields at worst a rebuild, never a bad kernel.
  That is also why there is no fsync: a torn write is caught as a hash mismatch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from filelock import FileLock, Timeout

from . import staging, unwritable, usage
from .safety import CacheError, check_dir_safety, log, strict_mode
from .unwritable import CacheUnwritable

__all__ = ["KernelCache", "CacheEntry", "BadEntry", "STATS", "MANIFEST", "LAUNCH_PATH", "KEY_RE", "SHA_RE",
           "default_cache_dir", "safe_name", "sha256_file", "compiler_tmpdir"]

MANIFEST = "manifest.json"
LAUNCH_PATH = "tilejit compiled launch path"   # the "kernel" of compiler/fastpath's module entry
_FORMAT = 1
# Lower-case only: keys become directory names, and upper/lower variants of one key would be
# distinct entries on case-sensitive filesystems but collide on case-insensitive ones.
KEY_RE = re.compile(r"[0-9a-f]{2,128}")
SHA_RE = re.compile(r"[0-9a-f]{64}")


class BadEntry(Exception):
    """An entry exists on disk but fails verification (the message says why)."""


class _Stats:
    """Process-wide counters; ``reset()`` between measurements, ``as_dict()`` to report."""

    _FIELDS = ("memory_hits", "disk_hits", "builds", "rejected")
    _mutex = threading.Lock()  # `x += 1` on an attribute is not atomic across threads

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.memory_hits = self.disk_hits = self.builds = self.rejected = 0

    def bump(self, name: str) -> None:
        with self._mutex:
            setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self._FIELDS}


STATS = _Stats()


def default_cache_dir() -> pathlib.Path:
    """``$TILEJIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tilejit``, else ``~/.cache/tilejit``."""
    explicit = os.environ.get("TILEJIT_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(os.path.expanduser(xdg)):
        return pathlib.Path(xdg).expanduser() / "tilejit"
    return pathlib.Path.home() / ".cache" / "tilejit"


def check_key(key) -> None:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be a lower-case hex string of 2-128 chars, got {key!r}")


def safe_name(name) -> bool:
    """True if ``name`` is a plain file name we are willing to join onto an entry directory."""
    return (isinstance(name, str) and name not in ("", ".", MANIFEST) and "/" not in name
            and "\\" not in name and ".." not in name and "\0" not in name)


def sha256_file(path: pathlib.Path) -> str:
    # O_NOFOLLOW: a symlink planted in an entry must never redirect us to another file.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        return h.hexdigest()


@contextlib.contextmanager
def compiler_tmpdir(work_dir):
    """The environment for a compiler run inside build directory ``work_dir``: its temporaries
    (TMPDIR) go to a subdirectory that is removed afterwards, so a compiler killed mid-build
    leaves nothing in the system's temp directory; if the whole process dies, the build
    directory (and the temporaries with it) is swept as stale by a later build."""
    tmp = pathlib.Path(work_dir) / ".tmp"
    tmp.mkdir(exist_ok=True)
    try:
        yield {**os.environ, "TMPDIR": str(tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class CacheEntry:
    """A verified entry. ``meta`` is the builder's dict; treat it as read-only (it is shared).
    ``files``: the artifact names its manifest lists (None: not known, any name is served)."""

    key: str
    path: pathlib.Path
    meta: dict
    files: frozenset | None = None

    def file(self, name: str) -> pathlib.Path:
        """Path of artifact ``name``; only artifacts the manifest lists (and so were hash-verified)."""
        if not safe_name(name):
            raise ValueError(f"invalid artifact name {name!r}")
        if self.files is not None and name not in self.files:
            raise CacheError(f"cache entry {self.path} has no verified artifact {name!r} (its manifest lists "
                             f"{sorted(self.files)}); remove the entry (`python -m compiler.cache verify --delete`) "
                             "so it is rebuilt")
        return self.path / name


class KernelCache:
    """Two-level (in-process dict, then disk) cache of build outputs keyed by hex strings.

    Each instance verifies a disk entry at most once and then serves it from memory; a new
    instance re-verifies. Lookups never take locks or write unless an entry is bad, so a
    read-only cache directory can serve every entry it holds.
    """

    def __init__(self, root: pathlib.Path | str | None = None, *, fallback: bool = True) -> None:
        # absolute(): a later chdir must not move the cache. Nothing is created until a write.
        self.root = (pathlib.Path(root).expanduser() if root is not None else default_cache_dir()).absolute()
        self._mem: dict[str, CacheEntry] = {}
        self._swept = False
        # fallback: a build that cannot be written here goes to this process's private cache
        # (unwritable.py); _unwritable: why this root could not be written, once it could not
        self.fallback = fallback
        self._unwritable: CacheUnwritable | None = None

    def __repr__(self) -> str:
        return f"KernelCache({str(self.root)!r})"

    # ---------------------------------------------------------------- public API

    def lookup(self, key: str, *, counted: bool = True) -> CacheEntry | None:
        """Return the verified entry for ``key`` or None. A bad disk entry counts as a miss.
        ``counted=False``: not a kernel (the launch-path module), left out of STATS."""
        check_key(key)
        entry = self._mem.get(key)
        if entry is not None:
            if counted:
                STATS.bump("memory_hits")
            usage.note_entry(key, entry.meta)
            return entry
        entry = self.load(key)
        if entry is None and os.path.lexists(self.entry_dir(key)):
            # Bad entry. Remove it only if nobody holds the lock (a holder re-checks and cleans
            # up itself): a lookup must never block behind someone else's build.
            entry = self._discard_bad(key)
        if entry is not None:
            if counted:
                STATS.bump("disk_hits")
            usage.note_entry(key, entry.meta)
        return entry

    def get_or_build(self, key: str, build: Callable[[pathlib.Path], dict], *, counted: bool = True) -> CacheEntry:
        """Return the entry for ``key``, calling ``build(tmpdir) -> meta`` at most once across processes.

        ``build`` writes plain files directly into ``tmpdir`` (no subdirectories, no symlinks, not
        named ``manifest.json``) and returns a JSON-serialisable dict that is stored as ``meta``.
        When the cache cannot take the entry (a full disk, a read-only directory), it is built in
        this process's private directory instead, with one warning (unwritable.py).
        """
        entry = self.lookup(key, counted=counted)
        if entry is not None:
            return entry
        if strict_mode():
            raise CacheError(
                f"TILEJIT_CACHE_STRICT=1: kernel cache {self.root} has no valid entry for key {key}, and "
                f"strict-cache mode forbids compiling. Populate the cache first: run the workload once "
                f"without TILEJIT_CACHE_STRICT (or run autotune) and then `python -m compiler.cache export "
                f"ARCHIVE`, and `python -m compiler.cache import ARCHIVE --cache-dir {self.root}` here.")
        if self._unwritable is None or not self.fallback:
            try:
                return self._build_here(key, build, counted)
            except CacheUnwritable as exc:
                if not self.fallback:
                    raise
                self._unwritable = exc
        private = unwritable.private_cache(KernelCache)
        unwritable.warn_once(self.root, self._unwritable.reason, private.root)
        try:
            return private.get_or_build(key, build, counted=counted)
        except CacheUnwritable as exc:
            raise CacheError(f"cannot compile a kernel: the kernel cache {self.root} cannot be written "
                             f"({self._unwritable.reason}), nor this process's private directory "
                             f"{private.root} ({exc.reason}). Free space, or point TILEJIT_CACHE_DIR at a "
                             "writable directory.") from exc

    def _build_here(self, key: str, build: Callable[[pathlib.Path], dict], counted: bool) -> CacheEntry:
        self.sweep_stale()
        with self.lock(key, blocking=True):
            entry = self.load(key)  # someone may have published while we waited for the lock
            if entry is not None:
                if counted:
                    STATS.bump("disk_hits")
                usage.note_entry(key, entry.meta)
                return entry
            self.move_aside(key)  # a bad entry, if any
            self._sweep_tmp(key)
            entry = self._build(key, build)
            self._mem[key] = entry
            if counted:
                STATS.bump("builds")
            usage.note_entry(key, entry.meta)
            return entry

    def created(self, key: str) -> float:
        """When the entry was published (its manifest's mtime; the directory's without one)."""
        d = self.entry_dir(key)
        try:
            return os.stat(d / MANIFEST).st_mtime
        except OSError:
            return os.lstat(d).st_mtime

    def entries(self) -> Iterator[CacheEntry]:
        """Yield every valid entry on disk (bad ones are skipped and counted as rejected)."""
        for key, _d in self.entry_dirs():
            entry = self._mem.get(key) or self.load(key)
            if entry is not None:
                yield entry

    def manifests(self) -> Iterator[tuple[str, dict]]:
        """(key, meta) of every entry whose manifest reads, its artifacts NOT verified: for reports
        and for choosing keys (what a lookup loads is verified then), never for loading."""
        for key, d in self.entry_dirs():
            try:
                man = json.loads((d / MANIFEST).read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(man, dict) and man.get("key") == key and isinstance(man.get("meta"), dict):
                yield key, man["meta"]

    def sweep_stale(self, force: bool = False) -> list[str]:
        """Once per instance (or when ``force``): cleans up what killed processes left under tmp/
        (staging.sweep: interrupted imports are finished or removed, stale build dirs deleted)."""
        if self._swept and not force:
            return []
        self._swept = True
        try:
            return staging.sweep(self)
        except OSError as exc:
            log.warning("tilejit cache: could not sweep %s/tmp: %s", self.root, exc)
            return []

    def forget(self) -> None:
        """Drops the in-memory map: the next lookup of each key re-verifies its disk entry."""
        self._mem.clear()

    def drop(self, key: str) -> None:
        """Forgets one key in memory: its next lookup re-verifies the disk entry (or rebuilds it)."""
        self._mem.pop(key, None)

    def still_valid(self, entry: CacheEntry) -> bool:
        """Whether ``entry`` is still on disk as it was verified (False after a prune or tampering)."""
        try:
            again = self.verify(entry.key)
        except (BadEntry, CacheError):
            return False
        return again is not None and again.files == entry.files

    def entry_dirs(self) -> Iterator[tuple[str, pathlib.Path]]:
        """(key, dir) of everything laid out like an entry, valid or not."""
        for d in sorted(self.root.glob("[0-9a-f][0-9a-f]/*")):
            if KEY_RE.fullmatch(d.name) and d.name[:2] == d.parent.name:
                yield d.name, d

    def remove(self, key: str) -> bool:
        """Unpublish and delete one entry under its lock; False if someone else holds the lock."""
        try:
            with self.lock(key, blocking=False):
                self.move_aside(key)
                self._mem.pop(key, None)
                return True
        except Timeout:
            return False

    def publish(self, key: str, staged: pathlib.Path) -> bool:
        """Publishes a complete entry directory staged on the cache's filesystem (an import) by
        rename, under the key's lock. False (nothing changed) when a valid entry is already there;
        CacheError when the published entry fails the cache's own verification (it is removed)."""
        with self.lock(key, blocking=True):
            if self.load(key) is not None:
                return False
            self.move_aside(key)  # a bad entry, if any
            final = self.entry_dir(key)
            final.parent.mkdir(exist_ok=True)
            os.rename(staged, final)
            if self.load(key) is None:
                self.move_aside(key)
                raise CacheError(f"entry {key} failed the cache's own verification after import")
            return True

    def clear(self) -> None:
        """Delete all entries and temp dirs. Not safe while other processes build into this root.

        Only names this class creates are touched, in case root was pointed at a shared directory.
        ``locks/`` is kept on purpose: unlinking a lock file another process holds would let a
        third process lock a fresh inode and build concurrently.
        """
        self._mem.clear()
        for child in [*self.root.glob("[0-9a-f][0-9a-f]"), self.root / "tmp"]:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)

    # ---------------------------------------------------------------- internals

    def entry_dir(self, key: str) -> pathlib.Path:
        return self.root / key[:2] / key

    def load(self, key: str) -> CacheEntry | None:
        """Verified disk entry (remembered in memory), or None if absent or bad (counted, logged)."""
        try:
            entry = self.verify(key)
        except BadEntry as exc:
            STATS.bump("rejected")
            log.warning("tilejit cache: rejecting entry %s: %s", key, exc)
            return None
        if entry is not None:
            self._mem[key] = entry
        return entry

    def verify(self, key: str) -> CacheEntry | None:
        """Load and fully check the disk entry. None if absent; raises BadEntry if invalid: among
        others when its directory is a symlink (it could point outside the cache) or it holds a
        file its manifest does not list (every file an entry holds is hash-verified)."""
        d = self.entry_dir(key)
        for p in (d.parent, d):
            if p.is_symlink():
                raise BadEntry(f"{p} is a symlink (to {os.readlink(p)}); entries are never links and a link "
                               "could lead outside the cache")
        check_dir_safety(self.root, d.parent, d)
        try:
            raw = (d / MANIFEST).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(d):
                raise BadEntry("entry directory has no manifest") from None
            return None
        except OSError as exc:
            raise BadEntry(f"manifest unreadable: {exc}") from None
        try:
            man = json.loads(raw)
        except ValueError as exc:
            raise BadEntry(f"manifest is not valid JSON: {exc}") from None
        if not isinstance(man, dict) or man.get("format", _FORMAT) != _FORMAT:
            raise BadEntry("manifest has an unknown format")
        if man.get("key") != key:
            raise BadEntry(f"manifest key {man.get('key')!r} does not match")
        meta, files = man.get("meta"), man.get("files")
        if not isinstance(meta, dict) or not isinstance(files, dict):
            raise BadEntry("manifest lacks a 'meta' or 'files' object")
        for name, digest in files.items():
            if not safe_name(name):
                raise BadEntry(f"unsafe file name {name!r} in manifest")
            if not isinstance(digest, str) or not SHA_RE.fullmatch(digest):
                raise BadEntry(f"bad digest for {name!r}")
            try:
                actual = sha256_file(d / name)
            except OSError as exc:
                raise BadEntry(f"artifact {name!r} unreadable: {exc}") from None
            if actual != digest:
                raise BadEntry(f"artifact {name!r} sha256 mismatch")
        try:
            present = {p.name for p in d.iterdir()}
        except OSError as exc:
            raise BadEntry(f"entry directory unreadable: {exc}") from None
        unlisted = sorted(present - set(files) - {MANIFEST})
        if unlisted:
            raise BadEntry(f"holds file(s) its manifest does not list: {', '.join(map(repr, unlisted))} (added or "
                           "left after the entry was built, so never verified)")
        return CacheEntry(key=key, path=d, meta=meta, files=frozenset(files))

    def lock(self, key: str, *, blocking: bool):
        """Acquire the key's file lock (a context manager). CacheError if the root is not writable."""
        locks = self.root / "locks"
        lock = FileLock(str(locks / f"{key}.lock"))
        try:
            locks.mkdir(parents=True, exist_ok=True)
            return lock.acquire(blocking=blocking)
        except Timeout:
            raise
        except OSError as exc:
            raise CacheUnwritable(
                f"kernel cache directory {self.root} is not writable ({exc}); it is read-only here and "
                f"has no valid entry for key {key}. Point TILEJIT_CACHE_DIR at a writable directory, "
                f"or pre-populate this cache.", str(exc)
            ) from exc

    def _discard_bad(self, key: str) -> CacheEntry | None:
        """Under a non-blocking lock, re-check a bad entry and move it aside if still bad."""
        try:
            with self.lock(key, blocking=False):
                try:
                    entry = self.verify(key)  # may have been repaired since we looked
                except BadEntry:
                    self.move_aside(key)
                else:
                    if entry is not None:
                        self._mem[key] = entry
                    return entry
        except (Timeout, CacheError):
            pass  # busy or read-only: just report a miss
        return None

    def move_aside(self, key: str) -> None:
        """Atomically unpublish the entry dir (caller holds the lock), then delete it."""
        d = self.entry_dir(key)
        tmp = self.root / "tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            aside = tmp / f"{key}.{uuid.uuid4().hex}.rejected"
            os.rename(d, aside)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CacheError(f"cannot remove bad cache entry {d}: {exc}") from exc
        shutil.rmtree(aside, ignore_errors=True)

    def _sweep_tmp(self, key: str) -> None:
        """Delete leftovers for ``key`` (killed builders). Safe: builds of a key only run under its lock."""
        tmp = self.root / "tmp"
        if tmp.is_dir():
            for stale in tmp.glob(f"{key}.*"):
                shutil.rmtree(stale, ignore_errors=True)

    def _build(self, key: str, build: Callable[[pathlib.Path], dict]) -> CacheEntry:
        try:
            (self.root / "tmp").mkdir(parents=True, exist_ok=True)
            work = pathlib.Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".build", dir=self.root / "tmp"))
        except OSError as exc:
            raise CacheUnwritable(f"cannot create a build directory under {self.root}/tmp ({exc}); "
                                  f"set TILEJIT_CACHE_DIR to a writable directory", str(exc)) from exc
        try:
            meta = build(work)
            if not isinstance(meta, dict):
                raise TypeError(f"cache builder must return a dict, got {type(meta).__name__}")
            files = {}
            for p in sorted(work.iterdir()):
                if not safe_name(p.name) or p.is_symlink() or not p.is_file():
                    raise CacheError(f"cache builder for {key} produced {p.name!r}: only plain files with "
                                     f"safe names (no '..', not {MANIFEST!r}) may be written, no subdirs/links")
                files[p.name] = sha256_file(p)
            text = json.dumps({"format": _FORMAT, "key": key, "meta": meta, "files": files},
                              sort_keys=True, indent=1, allow_nan=False)
            part = work / f".{MANIFEST}.part"
            part.write_text(text, encoding="utf-8")
            os.replace(part, work / MANIFEST)  # the manifest appears last and whole
            os.chmod(work, 0o755)  # mkdtemp makes 0o700; a shared cache must be readable by others
            final = self.entry_dir(key)
            final.parent.mkdir(exist_ok=True)
            try:
                os.rename(work, final)  # atomic publish
            except OSError:
                if not os.path.isdir(final):
                    raise
                # Published behind our lock's back (e.g. a cache import): keep it if valid.
                existing = self.load(key)
                if existing is not None:
                    shutil.rmtree(work, ignore_errors=True)
                    return existing
                self.move_aside(key)
                os.rename(work, final)
        except BaseException as exc:
            shutil.rmtree(work, ignore_errors=True)
            full = unwritable.out_of_space(exc)
            if full is not None:   # the disk, not the kernel: build it elsewhere (get_or_build)
                raise CacheUnwritable(f"kernel cache {self.root} is full: {full}", full) from exc
            raise
        return CacheEntry(key=key, path=final, meta=json.loads(text)["meta"], files=frozenset(files))
