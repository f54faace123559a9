"""The cache where processes die or files are altered: a manifest that no longer lists a file, a
symlinked entry, an import killed before and after its commit, an import over its byte limit, a
compiler killed mid-build, an entry pruned between its lookup and its load, decision files whose
configs could not run. Kills run in child processes."""
from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from compiler import kernel, language as tl
from compiler.cache import STATS, DecisionStore, KernelCache, decisions
from compiler.cache import cli as cache_cli
from compiler.cache.archive import ArchiveError, export_cache, import_cache
from compiler.cache.store import BadEntry, MANIFEST

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]
KEYS = ["ab" + "0" * 62, "cd" + "1" * 62, "ef" + "2" * 62]


def _build(payload: bytes):
    def build(d: pathlib.Path) -> dict:
        (d / "kernel.so").write_bytes(payload)
        (d / "kernel.cpp").write_text("// source")
        return {"kernel": "k"}
    return build


def _cache_with_entries(root) -> KernelCache:
    c = KernelCache(root)
    for i, k in enumerate(KEYS):
        c.get_or_build(k, _build(b"payload %d" % i))
    return c


def _cli(*args):
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cache_cli.main(list(args))
    return rc, out.getvalue()


# -- what an entry holds ------------------------------------------------------------------------------
def test_manifest_missing_a_file_is_bad_and_verify_says_what_to_do(tmp_path):
    c = _cache_with_entries(tmp_path)
    d = c.entry_dir(KEYS[0])
    man = json.loads((d / MANIFEST).read_text())
    del man["files"]["kernel.so"]                    # the kernel.so line removed
    (d / MANIFEST).write_text(json.dumps(man))
    with pytest.raises(BadEntry, match="does not list: 'kernel.so'"):
        KernelCache(tmp_path).verify(KEYS[0])
    rc, out = _cli("verify", "--cache-dir", str(tmp_path))
    assert rc == 1
    line = next(ln for ln in out.splitlines() if ln.startswith("BAD"))
    assert KEYS[0] in line and "fix: `python -m compiler.cache verify --delete" in line and "rebuilt" in line
    # a load refuses it, and the next build replaces it
    assert KernelCache(tmp_path).lookup(KEYS[0]) is None
    e = KernelCache(tmp_path).get_or_build(KEYS[0], _build(b"fresh"))
    assert e.file("kernel.so").read_bytes() == b"fresh"
    with pytest.raises(Exception, match="no verified artifact 'notes.txt'"):
        e.file("notes.txt")


def test_symlinked_entry_dir_is_refused(tmp_path):
    root = tmp_path / "cache"
    c = _cache_with_entries(root)
    d = c.entry_dir(KEYS[1])
    outside = tmp_path / "outside"
    shutil.move(str(d), outside)
    os.symlink(outside, d)
    with pytest.raises(BadEntry, match="is a symlink"):
        KernelCache(root).verify(KEYS[1])
    assert KernelCache(root).lookup(KEYS[1]) is None
    assert (outside / "kernel.so").exists()           # nothing outside the cache was touched


# -- imports that die, or are too big -------------------------------------------------------------------
KILLED_IMPORT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from compiler.cache import KernelCache, archive, staging
    from compiler.cache.store import KernelCache as KC
    where = sys.argv[4]
    if where == "staging":       # dies while members are being written
        real = archive._stream
        def stream(*a, **k):
            if len(list(os.scandir(a[1].parent))) >= 2:
                os._exit(9)
            return real(*a, **k)
        archive._stream = stream
    else:                        # dies after the commit, with one entry of three published
        real = KC.publish
        count = [0]
        def publish(self, key, d):
            count[0] += 1
            if count[0] == 2:
                os._exit(9)
            return real(self, key, d)
        KC.publish = publish
    archive.import_cache(KernelCache(sys.argv[2]), sys.argv[3])
""")


@pytest.mark.integration
@pytest.mark.parametrize("where", ["staging", "published"])
def test_killed_import_is_all_or_nothing_after_the_next_run(tmp_path, where):
    src = _cache_with_entries(tmp_path / "src")
    archive = tmp_path / "a.tar.gz"
    export_cache(src, archive)
    dest = tmp_path / "dest"
    script = tmp_path / "child.py"
    script.write_text(KILLED_IMPORT)
    res = subprocess.run([sys.executable, str(script), str(REPO), str(dest), str(archive), where],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 9, res.stderr
    staged = list((dest / "tmp").glob("import.*.staging"))
    assert staged, "the killed import left no staging directory: the kill point was not reached"
    # the next run (any build, an import, or verify) finishes or removes it
    swept = KernelCache(dest).sweep_stale()
    assert swept and not list((dest / "tmp").glob("import.*"))
    present = sorted(k for k in KEYS if KernelCache(dest).lookup(k) is not None)
    assert present == ([] if where == "staging" else KEYS), (where, present, swept)


def test_import_caps_the_bytes_it_reads(tmp_path):
    src = KernelCache(tmp_path / "src")
    src.get_or_build(KEYS[0], _build(b"x" * 100_000))
    archive = tmp_path / "a.tar.gz"
    export_cache(src, archive)
    dest = KernelCache(tmp_path / "dest")
    with pytest.raises(ArchiveError, match="exceed the import limit"):
        import_cache(dest, archive, max_bytes=50_000)
    assert dest.lookup(KEYS[0]) is None and not list((dest.root / "tmp").glob("import.*"))
    assert import_cache(dest, archive)["imported"] == [KEYS[0]]


# -- decisions that could not run ------------------------------------------------------------------------
def _bad_decision(root, cfg):
    from compiler import get_target
    from kernels.norm import RMS_NORM
    tgt = get_target("cpu")
    store = DecisionStore(root)
    store.record("rms_norm", tgt.name, decisions.fingerprint_hash(tgt), "fast", RMS_NORM.shape_key(N=64), {"N": 64},
                 {decisions.config_key(cfg): decisions.result(cfg, "ok", time_s=1e-6)})
    return store


@pytest.mark.parametrize("cfg, why", [({"BLOCK": 0}, "BLOCK=0 is not a positive block size"),
                                      ({"BLOK": 64}, "lacks BLOCK")])
def test_decision_that_cannot_run_is_refused_on_import(tmp_path, cfg, why):
    src = KernelCache(tmp_path / "src")
    src.get_or_build(KEYS[0], _build(b"k"))
    _bad_decision(src.root, cfg)
    archive = tmp_path / "a.tar.gz"
    export_cache(src, archive)
    dest = KernelCache(tmp_path / "dest")
    with pytest.raises(ArchiveError, match=why) as e:
        import_cache(dest, archive)
    assert "Nothing was imported" in str(e.value)
    assert dest.lookup(KEYS[0]) is None and not (dest.root / "autotune").exists()


@pytest.mark.compile
def test_planted_decision_that_cannot_run_is_ignored_on_load(tmp_path, monkeypatch, caplog):
    import kernels
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    _bad_decision(tmp_path, {"BLOCK": 0})
    decisions.clear_memo()
    x = torch.randn(3, 64)
    with caplog.at_level(logging.WARNING):
        y = kernels.rms_norm(x)
    assert torch.allclose(y, kernels.rms_norm_ref(x), atol=1e-5)
    assert any("ignoring the tuned decision for op 'rms_norm'" in r.getMessage() and "BLOCK=0" in r.getMessage()
               for r in caplog.records)
    assert kernels.config_for("rms_norm", N=64)["BLOCK"] > 0


NOT_A_DOCUMENT = "not a decision document (a JSON object with format 1 and 'entries')"


@pytest.mark.compile
@pytest.mark.parametrize("content, why", [
    (b"[1, 2]", f"it holds a JSON array, {NOT_A_DOCUMENT}"),
    (b"null", f"it holds JSON null, {NOT_A_DOCUMENT}"),
    (b"3.5", f"it holds a JSON number, {NOT_A_DOCUMENT}"),
    (b'"winner"', f"it holds a JSON string, {NOT_A_DOCUMENT}"),
    (b"true", f"it holds JSON true/false, {NOT_A_DOCUMENT}"),
    (b"", "it is empty"),
    (b'{"format": 1, "entr', "it is not valid JSON (Unterminated string starting at: line 1 column 15 (char 14))"),
    (b"\xff\xfe garbage", "it is not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    (b'{"format": 1, "entries": [1]}', "it is not a decision document of format 1 with 'entries'"),
    (b'{"format": 2, "entries": {}}', "it is not a decision document of format 1 with 'entries'")])
def test_decision_file_that_is_not_a_document_is_ignored_with_one_warning(tmp_path, monkeypatch, caplog,
                                                                          content, why):
    import kernels
    from compiler import get_target
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    tgt = get_target("cpu")
    path = DecisionStore(tmp_path).path("rms_norm", tgt.name, decisions.fingerprint_hash(tgt), "fast")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    decisions.clear_memo()
    x = torch.randn(3, 64)
    with caplog.at_level(logging.WARNING, logger="compiler.cache"):
        for _ in range(2):
            assert torch.allclose(kernels.rms_norm(x), kernels.rms_norm_ref(x), atol=1e-5)
        decisions.clear_memo()    # read again (a new process would): still one warning per file and problem
        kernels.rms_norm(x)
    assert [r.getMessage() for r in caplog.records] == [
        f"tilejit: ignoring the autotune decision file {path}: {why}. Op 'rms_norm' runs its default configs; the "
        "next tune of it replaces the file (`python -m compiler.autotune --kernels rms_norm`)."]
    assert kernels.config_for("rms_norm", N=64) == {"BLOCK": 64}


@pytest.mark.compile
@pytest.mark.parametrize("content", [b"[1, 2]", b'{"format": 1, "entr',
                                     b'{"format": 1, "entries": {"N=64": [1], "N=128": {"results": {"BLOCK=8": 3}}}}'])
def test_the_next_tune_replaces_a_decision_file_that_is_not_a_document(tmp_path, caplog, content):
    from compiler import get_target
    from compiler.autotune import tune_ops
    tgt = get_target("cpu")
    path = DecisionStore(tmp_path).path("rms_norm", tgt.name, decisions.fingerprint_hash(tgt), "fast")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    decisions.clear_memo()
    with caplog.at_level(logging.WARNING, logger="compiler.cache"):
        rows = tune_ops(["rms_norm"], {"rms_norm": [{"rows": 2, "N": 64}]}, cache_dir=tmp_path, progress=False,
                        spaces={"rms_norm": [{"BLOCK": 64}]}, repeat=1)
    assert rows[0]["winner"] == "BLOCK=64"
    doc, problem = decisions.load_document(path)
    assert problem is None and doc["entries"]["N=64"]["winner_config"] == {"BLOCK": 64}
    assert decisions.lookup("rms_norm", tgt, "fast", "N=64", root=tmp_path) == {"BLOCK": 64}
    assert len(caplog.records) <= 1 and all(str(path) in r.getMessage() for r in caplog.records)


@pytest.mark.no_toolchain
def test_verify_reports_a_decision_file_that_is_not_a_document(tmp_path):
    store = _bad_decision(tmp_path, {"BLOCK": 32})          # a valid file
    bad = store.dir / "matmul.cpu.0123456789abcdef.fast.json"
    bad.write_text("null")
    rc, out = _cli("verify", "--cache-dir", str(tmp_path))
    assert rc == 1 and out == (
        f"0 ok, 0 bad in {tmp_path}\n"
        f"BAD  decision file {bad.name}: it holds JSON null, {NOT_A_DOCUMENT}; its ops run their default configs "
        f"until the next tune replaces it, or `python -m compiler.cache verify --delete --cache-dir {tmp_path}` "
        "removes it\n"
        f"decision files: 1 ok, 1 bad in {store.dir}\n")
    rc, out = _cli("verify", "--delete", "--cache-dir", str(tmp_path))
    assert rc == 1 and "(deleted; the next tune writes it again)" in out and not bad.exists()
    assert _cli("verify", "--cache-dir", str(tmp_path)) == (
        0, f"0 ok, 0 bad in {tmp_path}\ndecision files: 1 ok, 0 bad in {store.dir}\n")


@pytest.mark.no_toolchain
def test_two_writers_of_one_key_leave_one_valid_decision(tmp_path):
    """Eight threads record results for the same key at once (each takes the file's lock, merges
    and replaces the file) while readers read it: every reader sees a whole document, and the
    file ends with every writer's results and one winner among them."""
    import threading
    store = DecisionStore(tmp_path)
    args = ("rms_norm", "cpu", "f" * 16, "fast", "N=64")
    torn, stop = [], threading.Event()

    def write(i):
        for j in range(10):
            cfg = {"BLOCK": 16 * (i + 1), "num_warps": j + 1}
            store.record(*args, {"N": 64}, {decisions.config_key(cfg): decisions.result(cfg, "ok", 1e-3 + i * 1e-5)})

    def read():
        while not stop.is_set():
            _doc, problem = decisions.load_document(store.path(*args[:4]))
            if problem:
                torn.append(problem)

    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not torn, torn[:3]
    doc, problem = decisions.load_document(store.path(*args[:4]))
    entry = doc["entries"]["N=64"]
    assert problem is None and len(entry["results"]) == 80
    assert entry["winner_config"]["BLOCK"] == 16 and not list(store.dir.glob("*.tmp"))


# -- builds that die, and entries that vanish -------------------------------------------------------------
KILLED_CXX = textwrap.dedent("""\
    #!/bin/sh
    case "$1" in --version) exec g++ --version ;; esac
    g++ "$@" &
    child=$!
    sleep 0.5
    kill -9 $child
    wait $child
    exit 1
""")

BUILD_WITH_KILLED_CXX = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import torch
    from compiler import kernel, language as tl, TargetError
    @kernel
    def big(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        for _ in tl.static_range(64):
            x = tl.exp(x) * 0.5 + tl.sin(x)
        tl.store(x_ptr + offs, x)
    try:
        big[(1,)](torch.zeros(64), BLOCK=64)
        print("BUILT")
    except TargetError as e:
        print("FAILED", str(e)[:200])
""")


@pytest.mark.integration
def test_killed_compiler_leaves_no_temporaries(tmp_path):
    cxx = tmp_path / "cxx"
    cxx.write_text(KILLED_CXX)
    cxx.chmod(0o755)
    script = tmp_path / "child.py"
    script.write_text(BUILD_WITH_KILLED_CXX)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    cache = tmp_path / "cache"
    env = {**os.environ, "CXX": str(cxx), "TMPDIR": str(tmpdir), "TILEJIT_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, str(script), str(REPO)], capture_output=True, text=True, env=env,
                         timeout=180)
    assert res.returncode == 0, res.stderr
    assert "FAILED" in res.stdout or "BUILT" in res.stdout, res.stdout
    assert list(tmpdir.iterdir()) == [], "the compiler left temporaries in $TMPDIR"
    assert not list((cache / "tmp").glob("*.build")), "the failed build left its directory"


@kernel
def _pruned(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 3.0)


@pytest.mark.compile
def test_entry_pruned_between_lookup_and_load_is_rebuilt(tmp_path, monkeypatch):
    from compiler import jit
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "a"))
    x = torch.zeros(16)
    _pruned[(1,)](x, BLOCK=16)                       # built and published
    # a copy of that cache: its kernel.so has never been loaded by this process
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("locks", "tmp"))
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "b"))
    _pruned.compiled.clear()
    real = KernelCache.lookup
    pruned = []

    def lookup(self, key, **kw):
        entry = real(self, key, **kw)
        if not pruned and entry is not None and entry.meta.get("kernel") == "_pruned":
            pruned.append(key)
            shutil.rmtree(entry.path)                 # a concurrent `prune` right after the lookup
        return entry
    monkeypatch.setattr(KernelCache, "lookup", lookup)
    jit.kernel_cache().forget()
    STATS.reset()
    _pruned[(1,)](x, BLOCK=16)
    assert pruned and torch.equal(x, torch.full((16,), 6.0))
    assert STATS.builds == 1
