"""Tests for compiler.cache: real files, real processes, real locks (no filesystem mocks)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import pytest

from compiler.cache import STATS, CacheError, KernelCache, default_cache_dir, stable_hash
from compiler.cache.store import BadEntry

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]
KEY = stable_hash({"kernel": "add", "dtype": "f32"})
OTHER = stable_hash({"kernel": "mul", "dtype": "f32"})

# Child process: `python -c CHILD root key mode aux`. Kept in one script so each test only pays
# for interpreter start-up.
CHILD = r"""
import json, os, pathlib, sys, time
sys.path.insert(0, sys.argv[5])
from compiler.cache import KernelCache, STATS
root, key, mode, aux = sys.argv[1], sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])

def build(d):
    if mode == "race":
        time.sleep(0.3)
        with open(aux / "counter", "a") as f:
            f.write(f"{os.getpid()}\n")
        (d / "kernel.bin").write_bytes(b"payload:" + key.encode())
        return {"builder": os.getpid()}
    with open(d / "kernel.bin", "wb") as f:  # half an artifact, then die
        f.write(b"x" * 4096)
        f.flush()
    if mode == "exit":
        os._exit(3)
    (aux / "started").touch()
    time.sleep(60)  # parent SIGKILLs us here

if mode == "race":  # barrier: all children reach get_or_build together
    (aux / f"ready.{os.getpid()}").touch()
    while not (aux / "go").exists():
        time.sleep(0.002)
e = KernelCache(root).get_or_build(key, build)
print(json.dumps({"data": e.file("kernel.bin").read_text(), "meta": e.meta, "stats": STATS.as_dict()}))
"""


def spawn(root, key, mode, aux) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(root), key, mode, str(aux), str(REPO)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def builder(payload: bytes = b"kernel-code", calls: list | None = None):
    def build(d: pathlib.Path) -> dict:
        if calls is not None:
            calls.append(d)
        (d / "kernel.bin").write_bytes(payload)
        (d / "kernel.src").write_text("// source")
        return {"grid": [4, 1], "name": "add"}
    return build


@pytest.fixture(autouse=True)
def _reset_stats():
    STATS.reset()
    yield


# ------------------------------------------------------------------ hits and basic behaviour

def test_build_memory_hit_then_disk_hit(tmp_path):
    calls = []
    c = KernelCache(tmp_path)
    e = c.get_or_build(KEY, builder(calls=calls))
    assert e.key == KEY and e.path == tmp_path / KEY[:2] / KEY
    assert e.file("kernel.bin").read_bytes() == b"kernel-code"
    assert e.meta == {"grid": [4, 1], "name": "add"}
    assert STATS.as_dict() == {"memory_hits": 0, "disk_hits": 0, "builds": 1, "rejected": 0}
    assert json.loads((e.path / "manifest.json").read_text())["files"]["kernel.bin"] == \
        hashlib.sha256(b"kernel-code").hexdigest()

    assert c.lookup(KEY) is e and c.get_or_build(KEY, builder(calls=calls)) is e
    assert STATS.memory_hits == 2 and len(calls) == 1

    c2 = KernelCache(str(tmp_path))
    e2 = c2.lookup(KEY)
    assert e2 is not None and e2.meta == e.meta and e2.path == e.path
    assert STATS.disk_hits == 1
    assert c2.lookup(KEY) is e2 and STATS.memory_hits == 3
    assert c2.lookup(OTHER) is None
    assert [x.key for x in KernelCache(tmp_path).entries()] == [KEY]
    assert not list((tmp_path / "tmp").iterdir())  # no temp dirs left behind


def test_root_is_created_lazily_and_clear(tmp_path):
    root = tmp_path / "deep" / "cache"
    c = KernelCache(root)
    assert c.lookup(KEY) is None and list(c.entries()) == []
    assert not root.exists()
    c.get_or_build(KEY, builder())
    c.get_or_build(OTHER, builder(b"other"))
    assert {e.key for e in c.entries()} == {KEY, OTHER}
    (root / "unrelated.txt").write_text("keep me")
    c.clear()
    assert c.lookup(KEY) is None and KernelCache(root).lookup(OTHER) is None
    assert (root / "unrelated.txt").read_text() == "keep me"
    assert list(c.entries()) == []


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    assert KernelCache().root == tmp_path / "explicit"
    monkeypatch.delenv("TILEJIT_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "tilejit"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # invalid per the XDG spec
    assert default_cache_dir() == pathlib.Path.home() / ".cache" / "tilejit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == pathlib.Path.home() / ".cache" / "tilejit"


# ------------------------------------------------------------------ processes

@pytest.mark.integration
def test_concurrent_processes_build_once(tmp_path):
    aux = tmp_path / "aux"
    aux.mkdir()
    procs = [spawn(tmp_path / "cache", KEY, "race", aux) for _ in range(4)]
    deadline = time.monotonic() + 30
    while len(list(aux.glob("ready.*"))) < 4:
        assert time.monotonic() < deadline, "children did not start"
        time.sleep(0.01)
    (aux / "go").touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert len((aux / "counter").read_text().splitlines()) == 1
    assert {r["data"] for r in results} == {"payload:" + KEY}
    assert len({r["meta"]["builder"] for r in results}) == 1
    assert sum(r["stats"]["builds"] for r in results) == 1
    assert sum(r["stats"]["disk_hits"] for r in results) == 3


def test_concurrent_threads_build_once(tmp_path):
    calls, barrier = [], threading.Barrier(4)

    def slow_build(d):
        time.sleep(0.2)
        return builder(calls=calls)(d)

    def worker(out):
        barrier.wait()
        out.append(KernelCache(tmp_path).get_or_build(KEY, slow_build))

    results: list = []
    threads = [threading.Thread(target=worker, args=(results,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and len(results) == 4
    assert {r.file("kernel.bin").read_bytes() for r in results} == {b"kernel-code"}
    assert STATS.builds == 1 and STATS.disk_hits == 3


@pytest.mark.integration
@pytest.mark.parametrize("how", ["sigkill", "os_exit"])
def test_writer_killed_mid_build(tmp_path, how):
    root, aux = tmp_path / "cache", tmp_path / "aux"
    aux.mkdir()
    p = spawn(root, KEY, "die" if how == "sigkill" else "exit", aux)
    if how == "sigkill":
        deadline = time.monotonic() + 30
        while not (aux / "started").exists():
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        p.kill()
    p.communicate(timeout=30)
    assert p.returncode != 0
    leftovers = list((root / "tmp").iterdir())
    assert leftovers  # the half-written build dir really was there

    c = KernelCache(root)
    assert c.lookup(KEY) is None and list(c.entries()) == []
    assert STATS.rejected == 0  # unpublished, so not even seen as an entry
    e = c.get_or_build(KEY, builder())  # lock was released by the dead process
    assert e.file("kernel.bin").read_bytes() == b"kernel-code"
    assert STATS.builds == 1
    assert not any(x.exists() for x in leftovers)  # stale temp dirs of this key were swept
    assert KernelCache(root).lookup(KEY).meta == e.meta


# ------------------------------------------------------------------ corruption

def _tamper(entry_dir: pathlib.Path, how: str, outside: pathlib.Path) -> None:
    art, man_path = entry_dir / "kernel.bin", entry_dir / "manifest.json"
    man = json.loads(man_path.read_text())
    if how == "flip_byte":
        data = bytearray(art.read_bytes())
        data[3] ^= 0x01
        art.write_bytes(bytes(data))
    elif how == "truncate":
        art.write_bytes(art.read_bytes()[:4])
    elif how == "delete_artifact":
        art.unlink()
    elif how == "delete_manifest":
        man_path.unlink()
    elif how == "garbage_manifest":
        man_path.write_text("{not json")
    elif how == "key_mismatch":
        man["key"] = OTHER
        man_path.write_text(json.dumps(man))
    elif how == "path_traversal":
        outside.write_bytes(b"secret")
        man["files"]["../outside.bin"] = hashlib.sha256(b"secret").hexdigest()
        man_path.write_text(json.dumps(man))
    elif how == "symlink":
        outside.write_bytes(art.read_bytes())  # same content, but via a link: must not be followed
        art.unlink()
        art.symlink_to(outside)


@pytest.mark.parametrize("how", ["flip_byte", "truncate", "delete_artifact", "delete_manifest",
                                 "garbage_manifest", "key_mismatch", "path_traversal", "symlink"])
def test_bad_entry_rejected_then_rebuilt(tmp_path, how):
    e = KernelCache(tmp_path).get_or_build(KEY, builder())
    _tamper(e.path, how, tmp_path / KEY[:2] / "outside.bin")
    STATS.reset()
    c = KernelCache(tmp_path)
    assert c.lookup(KEY) is None
    assert STATS.rejected == 1 and STATS.disk_hits == 0
    assert not e.path.exists()  # moved aside and deleted under the lock
    assert list(c.entries()) == []
    e2 = c.get_or_build(KEY, builder())
    assert STATS.builds == 1
    assert e2.file("kernel.bin").read_bytes() == b"kernel-code"
    assert KernelCache(tmp_path).lookup(KEY) is not None


@pytest.mark.parametrize("valid", [True, False])
def test_entry_published_behind_our_back(tmp_path, valid):
    """An importer that renames entries in without the lock: keep its entry if valid, else replace it."""
    src = KernelCache(tmp_path / "src").get_or_build(KEY, builder(b"imported"))
    root = tmp_path / "dst"

    def build(d):
        shutil.copytree(src.path, root / KEY[:2] / KEY)
        if not valid:
            (root / KEY[:2] / KEY / "kernel.bin").write_bytes(b"garbage!")
        return builder(b"ours")(d)

    e = KernelCache(root).get_or_build(KEY, build)
    assert e.file("kernel.bin").read_bytes() == (b"imported" if valid else b"ours")
    assert KernelCache(root).lookup(KEY).meta == e.meta
    assert not list((root / "tmp").iterdir())


def test_unlisted_file_makes_the_entry_bad(tmp_path):
    """Every file an entry holds must be listed (and so hash-verified): a manifest whose line for an
    artifact was removed must not serve that artifact unverified."""
    e = KernelCache(tmp_path).get_or_build(KEY, builder())
    (e.path / "notes.txt").write_text("added later")
    with pytest.raises(BadEntry, match="manifest does not list: 'notes.txt'"):
        KernelCache(tmp_path).verify(KEY)
    assert KernelCache(tmp_path).lookup(KEY) is None and STATS.rejected >= 1
    # the bad entry was moved aside by that lookup: the next build rebuilds it
    assert KernelCache(tmp_path).get_or_build(KEY, builder()).file("kernel.bin").exists()


def test_failing_builder_leaves_nothing(tmp_path):
    c = KernelCache(tmp_path)

    def boom(d):
        (d / "kernel.bin").write_bytes(b"half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        c.get_or_build(KEY, boom)
    assert c.lookup(KEY) is None and not list((tmp_path / "tmp").iterdir())
    with pytest.raises(TypeError, match="must return a dict"):
        c.get_or_build(KEY, lambda d: None)

    def subdir(d):
        (d / "sub").mkdir()
        return {}

    with pytest.raises(CacheError, match="only plain files"):
        c.get_or_build(KEY, subdir)
    with pytest.raises(CacheError):
        c.get_or_build(KEY, lambda d: (d / "manifest.json").write_text("{}") and {})
    assert not list((tmp_path / "tmp").iterdir())
    assert c.get_or_build(KEY, builder()).meta["name"] == "add"  # lock was released each time
    assert STATS.builds == 1


# ------------------------------------------------------------------ keys and hashing

@pytest.mark.parametrize("key", ["", "a", "../etc", "ab/cd", "xyz0", "ABCDEF", " " + KEY, KEY + "\n",
                                 "0" * 129, 123, None, b"abcd"])
def test_invalid_key_rejected(tmp_path, key):
    c = KernelCache(tmp_path)
    with pytest.raises(ValueError):
        c.lookup(key)
    with pytest.raises(ValueError):
        c.get_or_build(key, builder())
    assert not tmp_path.joinpath("locks").exists()


def test_stable_hash():
    # Pinned encoding: sorted keys, compact separators, UTF-8, sha256.
    assert stable_hash({"b": 1, "a": [1.5, None, True]}) == \
        hashlib.sha256(b'{"a":[1.5,null,true],"b":1}').hexdigest()
    a = {"x": 1, "y": {"p": [1, 2], "q": "s"}}
    b = {"y": {"q": "s", "p": [1, 2]}, "x": 1}
    assert stable_hash(a) == stable_hash(b)
    # Documented choice: tuples encode as lists (same specialisation, same key).
    assert stable_hash((1, 2)) == stable_hash([1, 2])
    assert stable_hash({"shape": (4, 4)}) == stable_hash({"shape": [4, 4]})
    # Values that compare equal in Python but mean different things stay distinct.
    distinct = [1, 1.0, True, "1", [1], {"1": 1}, 0.0, -0.0, None, 0, False, ""]
    assert len({stable_hash(v) for v in distinct}) == len(distinct)
    assert stable_hash(0.1 + 0.2) != stable_hash(0.3)
    assert len(stable_hash("x")) == 64
    assert stable_hash("caf\u00e9") != stable_hash("cafe") and len(stable_hash("\ud800")) == 64
    cyclic: list = []
    cyclic.append(cyclic)
    for bad in [{1: "int key"}, {1, 2}, b"bytes", object(), float("nan"), float("inf"), cyclic,
                {"nested": [pathlib.Path("p")]}]:
        with pytest.raises(TypeError):
            stable_hash(bad)


# ------------------------------------------------------------------ read-only caches

def _chmod_tree(root: pathlib.Path, mode: int) -> None:
    for dirpath, _dirs, _files in os.walk(root):
        os.chmod(dirpath, mode)


def _private_root() -> pathlib.Path:
    from compiler.cache import unwritable
    return unwritable._private["cache"].root


def _fallback_warning(root, reason: str) -> str:
    return (f"tilejit cache: cannot write to the kernel cache {root} ({reason}); this process compiles its kernels "
            f"into {_private_root()} instead, removed when it exits (the next process compiles them again). Free "
            "space there, or point TILEJIT_CACHE_DIR at a writable directory.")


@pytest.mark.compile
def test_read_only_root_chmod(tmp_path, caplog):
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod cannot make a directory unwritable "
                    "(test_unwritable_root_simulated covers the same paths)")
    root = tmp_path / "cache"
    KernelCache(root).get_or_build(KEY, builder())
    _chmod_tree(root, 0o555)
    try:
        if os.access(root, os.W_OK):
            pytest.skip("chmod 0o555 did not make the directory unwritable here")
        c = KernelCache(root)
        assert c.lookup(KEY).file("kernel.bin").read_bytes() == b"kernel-code"
        assert c.get_or_build(KEY, builder()).key == KEY
        assert STATS.disk_hits == 1 and STATS.builds == 1  # the build was before the chmod
        with caplog.at_level("WARNING", logger="compiler.cache"):
            e = c.get_or_build(OTHER, builder(b"other"))   # built in this process's private directory
        assert e.file("kernel.bin").read_bytes() == b"other" and e.path.is_relative_to(_private_root())
        assert [r.getMessage() for r in caplog.records] == [
            _fallback_warning(root, f"[Errno 13] Permission denied: '{root}/locks'")]
        assert not (root / OTHER[:2]).exists()
    finally:
        _chmod_tree(root, 0o755)


def test_unwritable_root_simulated(tmp_path, caplog, monkeypatch):
    """Works as root too: make locks/ and tmp/ impossible to create by putting files there."""
    root = tmp_path / "cache"
    KernelCache(root).get_or_build(KEY, builder())
    KernelCache(root).get_or_build(OTHER, builder(b"other"))
    for name in ("locks", "tmp"):
        shutil.rmtree(root / name)
        (root / name).write_text("not a directory")
    other_art = root / OTHER[:2] / OTHER / "kernel.bin"
    other_art.write_bytes(b"OTHER")  # corrupt one entry

    STATS.reset()
    c = KernelCache(root)
    assert c.lookup(KEY).file("kernel.bin").read_bytes() == b"kernel-code"
    assert c.lookup(OTHER) is None  # bad entry is a miss, even when it cannot be removed
    assert STATS.rejected == 1
    with caplog.at_level("WARNING", logger="compiler.cache"):
        for _ in range(2):   # the second call is a hit in the private directory: one warning in all
            e = c.get_or_build(OTHER, builder(b"rebuilt"))
    assert e.file("kernel.bin").read_bytes() == b"rebuilt" and e.path.is_relative_to(_private_root())
    assert [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()] == [
        _fallback_warning(root, f"[Errno 17] File exists: '{root}/locks'")]
    assert other_art.read_bytes() == b"OTHER"   # the cache is left as it was
    monkeypatch.setenv("TILEJIT_CACHE_STRICT", "1")
    with pytest.raises(CacheError, match="strict-cache mode forbids compiling"):
        KernelCache(root).get_or_build(OTHER, builder())
    monkeypatch.delenv("TILEJIT_CACHE_STRICT")

    # A root that cannot even be created: lookups are plain misses, builds go to the private directory.
    blocker = tmp_path / "file"
    blocker.write_text("")
    c2 = KernelCache(blocker / "cache")
    assert c2.lookup(KEY) is None
    assert c2.get_or_build(KEY, builder()).path.is_relative_to(_private_root())
