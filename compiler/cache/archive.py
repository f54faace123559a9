"""Export / import of kernel-cache entries as one ``.tar.gz`` with a top-level manifest.

Archive layout::

    manifest.json                 {"format", "tilejit_version", "targets": {name: fingerprint},
                                   "entries": {key: {"target", "kernel", "files": {name: sha256}}}}
    entries/<key>/<file>          every file of the entry, including the entry's own manifest.json

Import is all-or-nothing (even when killed: see staging.py) and never writes outside the cache
directory:

* members are read by hand (``tarfile.extract`` is never used); only regular files at
  ``manifest.json`` or ``entries/<key>/<safe name>`` are accepted - absolute paths, ``..``,
  symlinks, hard links, devices, FIFOs and anything else are refused before a byte is written;
* every file's sha256 is checked against the archive manifest, and the tilejit version and the
  target fingerprints against this machine, before anything is published;
* members are streamed (never whole into memory, at most 4 GiB in all) into a staging directory
  under ``<cache>/tmp``, committed once every check passed, then renamed into place, so a reader
  sees whole entries; each entry is then re-verified by ``KernelCache`` (its own manifest);
* decision files are checked too: every config in them must be one the op can run.

Target fingerprints: an entry's ``meta["fingerprint"]`` when the builder stored one; otherwise the
exporting machine's ``get_target(meta["target"]).fingerprint()``. Cache keys already include the
fingerprint, so a mismatched entry could never be *used* - the import check exists to tell the user
clearly, at import time, that the archive was built for another toolchain/host.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import re
import tarfile
import tempfile
import time
import zlib

from ..target import get_target
from ..version import __version__
from .decisions import SUBDIR as DECISIONS, validate_document
from .safety import CacheError
from .select import Selection
from .staging import Staging
from .store import KEY_RE, LAUNCH_PATH, MANIFEST, SHA_RE, KernelCache, safe_name

__all__ = ["ArchiveError", "export_cache", "import_cache"]

ARCHIVE_FORMAT = 1
_DECISION_RE = re.compile(r"[A-Za-z0-9_.:-]{1,200}\.json")
_MAX_MEMBER = 1 << 30  # a single artifact larger than 1 GiB is not a kernel
_MAX_TOTAL = 4 << 30   # an import stages at most this many bytes (a decompression bomb stops here)
_MAX_MANIFEST = 64 << 20


class ArchiveError(CacheError):
    """The archive is malformed, tampered with, unsafe, or built for another version/target."""


def _json(obj) -> object:
    """Normalise through JSON (tuples -> lists) so fingerprints compare by value."""
    return json.loads(json.dumps(obj, sort_keys=True))


def _current_fingerprint(target_name: str):
    return _json(get_target(target_name).fingerprint())


def _version() -> str:
    return __version__


def export_cache(cache: KernelCache, archive: str | os.PathLike, select: Selection | None = None) -> dict:
    """Write the valid entries and decision files `select` takes (default: all) into ``archive``
    (atomically). Returns the manifest, plus "left_out": {"entries": n, "decisions": n} not taken."""
    archive = pathlib.Path(archive)
    select = select or Selection()
    targets: dict[str, object] = {}
    entries: dict[str, dict] = {}
    blobs: list[tuple[str, bytes]] = []
    left_out = {"entries": 0, "decisions": 0}
    chosen = []
    for entry in cache.entries():
        launch_path = entry.meta.get("target") is None and entry.meta.get("kernel") == LAUNCH_PATH
        if select.entry(entry.key, entry.meta, cache.created(entry.key), launch_path):
            chosen.append((entry, launch_path))
        else:
            left_out["entries"] += 1
    if select.keys is None and all(lp for _, lp in chosen):   # the launch path's module goes with kernels
        left_out["entries"] += len(chosen)
        chosen = []
    for entry, _ in chosen:
        meta = entry.meta
        tname = meta.get("target") if isinstance(meta.get("target"), str) else None
        if tname is not None and tname not in targets:
            fp = meta.get("fingerprint")
            if fp is None:
                try:
                    fp = _current_fingerprint(tname)
                except Exception:  # noqa: BLE001 - a target unavailable here: record that we do not know
                    fp = None
            targets[tname] = _json(fp)
        files = {}
        names = sorted(p.name for p in entry.path.iterdir())
        for name in names:
            if name != MANIFEST and not safe_name(name):
                continue  # not part of the entry (e.g. a stray temp file); never exported
            fd = os.open(entry.path / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            files[name] = hashlib.sha256(data).hexdigest()
            blobs.append((f"entries/{entry.key}/{name}", data))
        # re-check against the entry's own manifest: the archive must carry exactly what was verified
        own = json.loads((entry.path / MANIFEST).read_bytes())["files"]
        for name, digest in own.items():
            if files.get(name) != digest:
                raise CacheError(f"entry {entry.key} changed while exporting ({name}); run `verify` and retry")
        entries[entry.key] = {"target": tname, "kernel": meta.get("kernel"), "files": files}
    decisions = {}
    for path in sorted((cache.root / DECISIONS).glob("*.json")) if (cache.root / DECISIONS).is_dir() else []:
        if path.is_file() and not path.is_symlink() and _DECISION_RE.fullmatch(path.name):
            data = path.read_bytes()
            try:
                doc = json.loads(data)
            except ValueError:
                doc = {}
            if not select.decision(path.name, doc if isinstance(doc, dict) else {}, path.stat().st_mtime):
                left_out["decisions"] += 1
                continue
            decisions[path.name] = hashlib.sha256(data).hexdigest()
            blobs.append((f"{DECISIONS}/{path.name}", data))
    manifest = {"format": ARCHIVE_FORMAT, "tilejit_version": _version(), "created": time.time(),
                "targets": targets, "entries": entries, "decisions": decisions}
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(prefix=f".{archive.name}.", suffix=".part", dir=archive.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name, data in [(MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode()), *blobs]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(manifest["created"])
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
        os.replace(part, archive)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
    return {**manifest, "left_out": left_out}


def _member_path(info: tarfile.TarInfo) -> tuple[str, str] | None:
    """(key, file) for an entry member, None for the top-level manifest; ArchiveError if unsafe."""
    name = info.name
    if name.startswith(("/", "\\")) or os.path.isabs(name) or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"archive member {name!r} has an absolute path: refusing the archive")
    parts = name.split("/")
    if any(p in ("..", ".") for p in parts) or "\\" in name or "\0" in name:
        raise ArchiveError(f"archive member {name!r} contains '..' or an unsafe path: refusing the archive")
    if not info.isreg():
        kind = ("symlink" if info.issym() else "hard link" if info.islnk() else
                "device" if info.ischr() or info.isblk() else "FIFO" if info.isfifo() else
                "directory" if info.isdir() else "special file")
        raise ArchiveError(f"archive member {name!r} is a {kind}: only regular files are accepted")
    if info.size > _MAX_MEMBER:
        raise ArchiveError(f"archive member {name!r} is implausibly large ({info.size} bytes)")
    if name == MANIFEST:
        return None
    if len(parts) == 2 and parts[0] == DECISIONS and _DECISION_RE.fullmatch(parts[1]) and ".." not in parts[1]:
        return DECISIONS, parts[1]
    if (len(parts) == 3 and parts[0] == "entries" and KEY_RE.fullmatch(parts[1])
            and (parts[2] == MANIFEST or safe_name(parts[2]))):
        return parts[1], parts[2]
    raise ArchiveError(f"unexpected archive member {name!r} (expected manifest.json or entries/<key>/<file>)")


def _stream(f, out_path: pathlib.Path, size: int, budget: list[int], name: str) -> str:
    """Copies one member to ``out_path`` in chunks (never whole into memory), charging ``budget``
    (bytes left for the whole archive); returns its sha256."""
    h = hashlib.sha256()
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = f.read(1 << 20) if f is not None else b""
            if not chunk:
                break
            written += len(chunk)
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise ArchiveError(f"archive contents exceed the import limit of {_MAX_TOTAL >> 20} MiB (at member "
                                   f"{name!r}); nothing was imported. Pass max_bytes=... to import a larger cache")
            h.update(chunk)
            out.write(chunk)
    if written != size:
        raise ArchiveError(f"archive member {name!r} is truncated")
    return h.hexdigest()


def _read_archive(archive: pathlib.Path, stage: Staging, max_bytes: int) -> tuple[dict, dict[str, dict[str, str]]]:
    """Every member checked for safety and streamed into ``stage``; returns (manifest,
    {key: {file: sha256}}) with the decision files under the DECISIONS key."""
    manifest = None
    digests: dict[str, dict[str, str]] = {}
    budget = [max_bytes]
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for info in tar:
                where = _member_path(info)
                f = tar.extractfile(info)
                if where is None:
                    if manifest is not None:
                        raise ArchiveError("archive has two manifest.json members")
                    if info.size > _MAX_MANIFEST:
                        raise ArchiveError(f"archive manifest is implausibly large ({info.size} bytes)")
                    blob = f.read() if f is not None else b""
                    budget[0] -= len(blob)
                    try:
                        manifest = json.loads(blob)
                    except ValueError as exc:
                        raise ArchiveError(f"archive manifest is not valid JSON: {exc}") from None
                    continue
                key, fname = where
                if fname in digests.setdefault(key, {}):
                    raise ArchiveError(f"archive member {info.name!r} appears twice")
                if key == DECISIONS:
                    dest = stage.decision_path(fname)
                else:
                    d = stage.dir / "entries" / key
                    dest = (d if d.is_dir() else stage.entry_dir(key)) / fname
                digests[key][fname] = _stream(f, dest, info.size, budget, info.name)
    except ArchiveError:
        raise
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise ArchiveError(f"{archive} is corrupt or not a tilejit cache archive: "
                           f"{type(exc).__name__}: {exc}; nothing was imported") from None
    if not isinstance(manifest, dict):
        raise ArchiveError(f"{archive} has no manifest.json: not a tilejit cache archive")
    return manifest, digests


def _check_contents(manifest: dict, digests: dict[str, dict[str, str]]) -> dict[str, dict]:
    if manifest.get("format") != ARCHIVE_FORMAT:
        raise ArchiveError(f"unknown archive format {manifest.get('format')!r}")
    entries = manifest.get("entries")
    if not isinstance(entries, dict) or not isinstance(manifest.get("targets"), dict):
        raise ArchiveError("archive manifest lacks 'entries' or 'targets'")
    decisions = manifest.get("decisions", {})
    if not isinstance(decisions, dict) or set(digests.get(DECISIONS, {})) != set(decisions):
        raise ArchiveError("archive decision files differ from its manifest's 'decisions'")
    for fname, digest in decisions.items():
        if digests[DECISIONS][fname] != digest:
            raise ArchiveError(f"decision file {fname!r} does not match its sha256 in the archive manifest "
                               "(corrupted or tampered with); nothing was imported")
    if set(digests) - set(entries) - {DECISIONS}:
        raise ArchiveError(f"archive holds files of entries its manifest does not list: "
                           f"{sorted(set(digests) - set(entries) - {DECISIONS})}")
    for key, ent in entries.items():
        files = ent.get("files") if isinstance(ent, dict) else None
        if not KEY_RE.fullmatch(str(key)) or not isinstance(files, dict) or MANIFEST not in files:
            raise ArchiveError(f"archive manifest entry {key!r} is malformed")
        got = digests.get(key, {})
        if set(got) != set(files):
            raise ArchiveError(f"entry {key}: files in the archive {sorted(got)} differ from its manifest {sorted(files)}")
        for fname, digest in files.items():
            if not isinstance(digest, str) or not SHA_RE.fullmatch(digest):
                raise ArchiveError(f"entry {key}: bad sha256 for {fname!r} in the archive manifest")
            if got[fname] != digest:
                raise ArchiveError(f"entry {key}: {fname!r} does not match its sha256 in the archive manifest "
                                   f"(corrupted or tampered with); nothing was imported")
    return entries


def _check_compat(manifest: dict) -> tuple[list[str], list[str]]:
    """(problems that make this archive unusable here: version, target fingerprints; targets of the
    archive that cannot be checked here because they are not available here). Entries of such a
    target are imported as they are: their keys hash its fingerprint, so they are only ever used
    where it matches (a cache built with gpu:sm_90 on a CPU machine, shipped to the GPU machine)."""
    problems, unchecked = [], []
    if manifest.get("tilejit_version") != _version():
        problems.append(f"archive was exported by tilejit {manifest.get('tilejit_version')!r}, "
                        f"this is tilejit {_version()!r}")
    for tname, fp in sorted(manifest["targets"].items()):
        try:
            tgt = get_target(tname)
            here, unknown = _json(tgt.fingerprint()), tgt.unknown_here()
        except Exception as exc:  # noqa: BLE001 - unknown / unavailable target
            unchecked.append(f"target {tname!r} is not available here, so its entries were not checked against "
                             f"this machine ({exc})")
            continue
        if unknown:   # e.g. no C++ compiler here: its version cannot be compared, the entries only run
            unchecked.append(f"target {tname!r}: {', '.join(unknown)} of its fingerprint cannot be checked here "
                             f"({tgt.cannot_build() or 'its toolchain is not installed'}); its entries are imported "
                             "for running, as built")
        if fp is None:
            problems.append(f"target {tname!r}: the archive does not record its fingerprint")
        elif isinstance(fp, dict) and isinstance(here, dict):
            diff = sorted(k for k in set(fp) | set(here) if fp.get(k) != here.get(k) and k not in unknown)
            if diff:
                problems.append(f"target {tname!r} fingerprint differs from this machine's (fields: {', '.join(diff)})")
        elif _json(fp) != here:
            problems.append(f"target {tname!r} fingerprint differs from this machine's")
    return problems, unchecked


def import_cache(cache: KernelCache, archive: str | os.PathLike, *, force: bool = False,
                 max_bytes: int | None = None) -> dict:
    """Verify ``archive`` completely, then publish its entries into ``cache``, all or nothing.

    Returns {"entries": {key: (target, kernel)}, "imported": [...], "skipped": [...],
    "decisions_imported": [...], "decisions_skipped": [...], "problems": [...], "unchecked": [...]}
    (unchecked: targets not available here, see _check_compat): kernel entries (skipped: a valid
    entry with that key exists) and the
    autotuner's decision files (skipped: this cache has its own file of that name), counted apart.
    Raises ArchiveError (nothing published) on a corrupt or unsafe archive, on decisions that would
    not run, on contents over ``max_bytes`` (default 4 GiB), or on a version/target mismatch unless
    ``force``. Members are streamed into a staging directory (never whole into memory) that is
    committed once everything checks out (see staging.py).
    """
    archive = pathlib.Path(archive)
    root = cache.root
    cache.sweep_stale(force=True)   # an import killed earlier is finished or removed first
    try:
        stage = Staging(cache, DECISIONS)
    except OSError as exc:
        raise CacheError(f"cannot write to the kernel cache {root} ({exc})") from exc
    with stage:
        manifest, digests = _read_archive(archive, stage, _MAX_TOTAL if max_bytes is None else max_bytes)
        entries = _check_contents(manifest, digests)
        problems, unchecked = _check_compat(manifest)
        if problems and not force:
            raise ArchiveError("refusing to import " + str(archive) + ": " + "; ".join(problems)
                               + ". Re-export on a machine matching this one, or pass --force to import anyway "
                               "(mismatched entries are then simply never used).")
        for key in sorted(entries):
            d = stage.dir / "entries" / key
            try:
                man = json.loads((d / MANIFEST).read_bytes())
            except ValueError:
                man = None
            if not isinstance(man, dict) or man.get("key") != key or \
                    set(man.get("files", {})) | {MANIFEST} != set(digests[key]):
                raise ArchiveError(f"entry {key}: its own manifest does not describe the archived files")
            os.chmod(d, 0o755)
        for name in sorted(digests.get(DECISIONS, {})):
            _check_decision_file(name, stage.decision_path(name))
        stage.commit()
        try:
            res = stage.publish()
        except CacheError as exc:
            raise ArchiveError(str(exc)) from None
    dec = f"{DECISIONS}/"
    return {"entries": {k: (e.get("target"), e.get("kernel")) for k, e in entries.items()},
            "imported": [k for k in res["imported"] if not k.startswith(dec)],
            "skipped": [k for k in res["skipped"] if not k.startswith(dec)],
            "decisions_imported": [k for k in res["imported"] if k.startswith(dec)],
            "decisions_skipped": [k for k in res["skipped"] if k.startswith(dec)],
            "problems": problems, "unchecked": unchecked}


def _check_decision_file(name: str, path: pathlib.Path) -> None:
    """A decision file must be a decision document whose every config would run (decisions.py)."""
    try:
        doc = json.loads(path.read_bytes())
    except ValueError as exc:
        raise ArchiveError(f"decision file {name!r} is not valid JSON ({exc}); nothing was imported") from None
    bad = validate_document(doc)
    if bad:
        raise ArchiveError(f"decision file {name!r} holds decisions that would not run: {bad[0]}"
                           + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                           + ". Nothing was imported; on the exporting machine delete that file, re-tune "
                             "(`python -m compiler.autotune`) and export again.")
