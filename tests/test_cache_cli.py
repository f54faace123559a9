"""`python -m compiler.cache`: export/import archives (verified, safe), verify, prune, strict-cache
mode, unsafe cache directories and read-only cache directories."""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest

import compiler.cache
from compiler.cache import cli as cache_cli
from compiler.cache import CacheError, KernelCache, check_dir_safety
from compiler.cache.archive import ArchiveError, import_cache

pytestmark = pytest.mark.compile

REPO = pathlib.Path(__file__).resolve().parents[1]
KEY = "ab" + "0" * 62
OTHER = "cd" + "1" * 62

# A child that runs one real kernel and reports STATS (builds counted, not timed).
RUN_KERNEL = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import torch
    from compiler import kernel, language as tl
    from compiler.cache import STATS

    @kernel
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    add_one[(2,)](x, out, 100, BLOCK=64)
    assert torch.equal(out, x + 1)
    print(json.dumps(STATS.as_dict()))
""")


def run_kernel(cache_dir, strict=False) -> subprocess.CompletedProcess:
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(cache_dir), "TILEJIT_TARGET": "cpu"}
    env.pop("TILEJIT_CACHE_STRICT", None)
    if strict:
        env["TILEJIT_CACHE_STRICT"] = "1"
    src = pathlib.Path(cache_dir).parent / "run_kernel.py"  # kernels must live in a file
    src.write_text(RUN_KERNEL)
    return subprocess.run([sys.executable, str(src), str(REPO)], env=env, capture_output=True, text=True,
                          timeout=120)


def cli_subprocess(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler.cache", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli(*args) -> _Result:
    """The CLI in-process (a subprocess costs ~2 s of imports); output captured."""
    import contextlib  # noqa: PLC0415
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cache_cli.main(list(args))
    return _Result(rc, out.getvalue(), err.getvalue())


def builder(payload: bytes = b"kernel-code", **meta):
    def build(d: pathlib.Path) -> dict:
        (d / "kernel.bin").write_bytes(payload)
        return {"kernel": "k", **meta}
    return build


def entries_on_disk(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.glob("[0-9a-f][0-9a-f]/*"))


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache with one real compiled cpu kernel and its exported archive."""
    base = tmp_path_factory.mktemp("populated")
    root = base / "cache"
    res = run_kernel(root)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["builds"] == 1
    archive = base / "kernels.tar.gz"
    res = cli_subprocess("export", str(archive), "--cache-dir", str(root))
    assert res.returncode == 0, res.stderr
    assert "exported 1 kernel entry (cpu 1) and 0 decision files to " in res.stdout
    return root, archive


# ------------------------------------------------------------------ export -> import -> zero compiles

@pytest.mark.integration
def test_export_import_strict_zero_compiles(populated, tmp_path):
    root, archive = populated
    with tarfile.open(archive) as tar:
        man = json.load(tar.extractfile("manifest.json"))
    import compiler  # noqa: PLC0415
    assert man["tilejit_version"] == compiler.__version__
    assert set(man["targets"]) == {"cpu"} and man["targets"]["cpu"] == json.loads(
        json.dumps(compiler.get_target("cpu").fingerprint()))
    (key, ent), = man["entries"].items()
    assert {"kernel.so", "manifest.json"} <= set(ent["files"]) and ent["kernel"] == "add_one"

    empty = tmp_path / "imported"
    res = cli("import", str(archive), "--cache-dir", str(empty))
    assert res.returncode == 0, res.stderr
    assert entries_on_disk(empty) == [key]
    res = run_kernel(empty, strict=True)
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout.splitlines()[-1])
    assert stats["builds"] == 0 and stats["disk_hits"] == 1

    # importing again skips what is there; ls / stats / verify see it
    res = cli("import", str(archive), "--cache-dir", str(empty))
    assert res.returncode == 0 and res.stdout.startswith("imported 0 kernel entries and 0 decision files into ")
    assert "; already there, kept: 1 kernel entry (cpu 1) and 0 decision files" in res.stdout
    res = cli("ls", "--cache-dir", str(empty))
    assert res.returncode == 0 and key[:12] in res.stdout and "add_one" in res.stdout and "cpu" in res.stdout
    res = cli("stats", "--json", "--cache-dir", str(empty))
    st = json.loads(res.stdout)
    assert st["count"] == 1 and st["targets"]["cpu"]["count"] == 1 and st["bytes"] > 0
    assert cli("verify", "--cache-dir", str(empty)).returncode == 0


@pytest.mark.integration
def test_strict_mode_error_names_the_kernel_and_the_prebuild(tmp_path, monkeypatch):
    res = run_kernel(tmp_path / "empty", strict=True)
    assert res.returncode != 0
    assert ("CacheMissError: TILEJIT_CACHE_STRICT=1: kernel 'add_one' for target cpu, policy fast, specialised as "
            "add_one(x_ptr: *fp32, out_ptr: *fp32, n: int32, BLOCK=64) is not in the kernel cache") in res.stderr
    assert re.search(r"\(key [0-9a-f]{16}\)", res.stderr)
    assert "The cache holds no build of 'add_one' for cpu." in res.stderr
    assert "python -m compiler.cache export tilejit-cache.tar.gz --keys used-keys.txt" in res.stderr
    assert "compiler.cache import" in res.stderr
    # the launch line is the traceback's only frame: none of the compiler's
    frames = re.findall(r'^  File "([^"]+)"', res.stderr, re.M)
    assert frames and all(f.endswith("run_kernel.py") for f in frames), res.stderr
    assert not entries_on_disk(tmp_path / "empty")

    monkeypatch.setenv("TILEJIT_CACHE_STRICT", "1")
    c = KernelCache(tmp_path / "c")
    with pytest.raises(CacheError, match=KEY):
        c.get_or_build(KEY, builder())
    monkeypatch.delenv("TILEJIT_CACHE_STRICT")
    c.get_or_build(KEY, builder())
    monkeypatch.setenv("TILEJIT_CACHE_STRICT", "1")
    assert KernelCache(tmp_path / "c").get_or_build(KEY, builder()).key == KEY  # hits are fine


# ------------------------------------------------------------------ tampered / unsafe archives

def _rewrite(archive: pathlib.Path, out: pathlib.Path, edit) -> None:
    """Copy archive member by member, letting ``edit(info, data)`` change or add members."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        members = [(m, src.extractfile(m).read()) for m in src.getmembers()]
        for info, data in edit(members):
            info.size = len(data) if data is not None else 0
            dst.addfile(info, io.BytesIO(data) if data is not None else None)


def test_flipped_byte_in_archive_imports_nothing(populated, tmp_path):
    _root, archive = populated
    # 1. a byte flipped inside an artifact (archive rebuilt, so only the sha256 can catch it)
    bad = tmp_path / "bad.tar.gz"

    def flip(members):
        for info, data in members:
            if info.name.endswith("kernel.so"):
                data = bytearray(data)
                data[len(data) // 2] ^= 0x01
                data = bytes(data)
            yield info, data
    _rewrite(archive, bad, flip)
    dest = tmp_path / "dest"
    with pytest.raises(ArchiveError, match="sha256"):
        import_cache(KernelCache(dest), bad)
    assert not entries_on_disk(dest)
    res = cli("import", str(bad), "--cache-dir", str(dest))
    assert res.returncode == 2 and "sha256" in res.stderr and not entries_on_disk(dest)

    # 2. a byte flipped in the compressed file itself
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad2 = tmp_path / "bad2.tar.gz"
    bad2.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError):
        import_cache(KernelCache(dest), bad2)
    assert not entries_on_disk(dest)
    if (dest / "tmp").exists():
        assert not list((dest / "tmp").iterdir())


@pytest.mark.parametrize("evil", ["../evil", "/tmp/tilejit-abs-evil", "entries/../../evil",
                                  "symlink", "device", "hardlink"])
def test_unsafe_members_refused(populated, tmp_path, evil):
    _root, archive = populated
    bad = tmp_path / "evil.tar.gz"
    outside = tmp_path / "evil"

    def add(members):
        yield from members
        if evil == "symlink":
            info = tarfile.TarInfo("entries/" + KEY + "/link")
            info.type, info.linkname = tarfile.SYMTYPE, str(outside)
            yield info, None
        elif evil == "hardlink":
            info = tarfile.TarInfo("entries/" + KEY + "/hl")
            info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
            yield info, None
        elif evil == "device":
            info = tarfile.TarInfo("entries/" + KEY + "/dev")
            info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            yield info, None
        else:
            yield tarfile.TarInfo(evil), b"pwned"
    _rewrite(archive, bad, add)
    dest = tmp_path / "cache" / "dest"
    with pytest.raises(ArchiveError):
        import_cache(KernelCache(dest), bad)
    assert not outside.exists() and not (tmp_path / "cache" / "evil").exists()
    assert not os.path.exists("/tmp/tilejit-abs-evil")
    assert not entries_on_disk(dest)


def test_version_and_target_mismatch_refused(populated, tmp_path):
    _root, archive = populated
    for field, value in [("tilejit_version", "0.0.0-other"), ("targets", {"cpu": {"target": "cpu", "isa": "x"}})]:
        bad = tmp_path / f"{field}.tar.gz"

        def edit(members):
            for info, data in members:
                if info.name == "manifest.json":
                    man = json.loads(data)
                    man[field] = value
                    data = json.dumps(man).encode()
                yield info, data
        _rewrite(archive, bad, edit)
        dest = tmp_path / f"dest-{field}"
        res = cli("import", str(bad), "--cache-dir", str(dest))
        assert res.returncode == 2 and "--force" in res.stderr, res.stderr
        assert ("0.0.0-other" in res.stderr) if field == "tilejit_version" else ("fingerprint" in res.stderr)
        assert not entries_on_disk(dest)
        res = cli("import", str(bad), "--force", "--cache-dir", str(dest))
        assert res.returncode == 0, res.stderr
        assert len(entries_on_disk(dest)) == 1


# ------------------------------------------------------------------ verify / prune / clear

@pytest.mark.no_toolchain
def test_verify_finds_corrupted_artifact(tmp_path, capsys):
    root = tmp_path / "cache"
    KernelCache(root).get_or_build(KEY, builder())
    KernelCache(root).get_or_build(OTHER, builder(b"other"))
    (root / OTHER[:2] / OTHER / "kernel.bin").write_bytes(b"OTHEr")
    assert cache_cli.main(["verify", "--cache-dir", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"BAD  {OTHER}" in out and "sha256 mismatch" in out and "1 ok, 1 bad" in out
    assert entries_on_disk(root) == [KEY, OTHER]
    assert cache_cli.main(["verify", "--delete", "--cache-dir", str(root)]) == 1
    assert entries_on_disk(root) == [KEY]
    assert cache_cli.main(["verify", "--cache-dir", str(root)]) == 0


@pytest.mark.no_toolchain
def test_prune_by_size_and_age_and_clear(tmp_path, capsys):
    root = tmp_path / "cache"
    keys = [f"{i:02x}" + "e" * 62 for i in range(4)]
    c = KernelCache(root)
    for i, k in enumerate(keys):
        c.get_or_build(k, builder(b"x" * 1000))
        t = 1_000_000_000 + i * 86400  # distinct, ordered creation times
        os.utime(root / k[:2] / k / "manifest.json", (t, t))
    size = sum(p.stat().st_size for p in (root / keys[0][:2] / keys[0]).iterdir())
    assert cache_cli.main(["prune", "--max-bytes", str(2 * size), "--cache-dir", str(root)]) == 0
    assert entries_on_disk(root) == keys[2:]  # the oldest went first
    assert cache_cli.main(["prune", "--older-than", "1", "--cache-dir", str(root)]) == 0
    assert entries_on_disk(root) == []
    c.get_or_build(keys[0], builder())
    assert cache_cli.main(["prune", "--cache-dir", str(root)]) == 2  # needs a criterion
    assert cache_cli.main(["clear", "--cache-dir", str(root)]) == 0
    assert entries_on_disk(root) == []


# ------------------------------------------------------------------ unsafe and read-only directories

@pytest.mark.no_toolchain
def test_world_writable_dir_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    KernelCache(root).get_or_build(KEY, builder())
    os.chmod(root, 0o777)
    with pytest.raises(CacheError, match="world-writable"):
        KernelCache(root).lookup(KEY)
    monkeypatch.setenv("TILEJIT_CACHE_ALLOW_UNSAFE", "1")
    with pytest.warns(RuntimeWarning, match="world-writable"):
        assert KernelCache(root).lookup(KEY) is not None
    monkeypatch.delenv("TILEJIT_CACHE_ALLOW_UNSAFE")
    os.chmod(root, 0o1777)  # sticky: others cannot replace our entries (they would be owned by them)
    with pytest.warns(RuntimeWarning, match="group-writable"):  # 1777 is group-writable too
        assert KernelCache(root).lookup(KEY) is not None
    os.chmod(root, 0o775)
    compiler.cache.safety._warned_dirs.clear()
    with pytest.warns(RuntimeWarning, match="group-writable"):
        check_dir_safety(root)
    os.chmod(root, 0o755)


@pytest.mark.integration
def test_read_only_cache_serves_kernel(populated, tmp_path):
    """Import, then make locks/ and tmp/ impossible to create (works as root); with chmod too
    when not root. A real kernel still runs with zero compiles in strict mode."""
    _root, archive = populated
    root = tmp_path / "ro"
    import_cache(KernelCache(root), archive)
    for name in ("locks", "tmp"):
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).write_text("not a directory")
    chmodded = False
    if os.geteuid() != 0:
        for dirpath, _dirs, _files in os.walk(root):
            os.chmod(dirpath, 0o555)
        chmodded = True
    try:
        res = run_kernel(root, strict=True)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout.splitlines()[-1])["builds"] == 0
        res = cli("ls", "--cache-dir", str(root))
        assert res.returncode == 0 and "add_one" in res.stdout
    finally:
        if chmodded:
            for dirpath, _dirs, _files in os.walk(root):
                os.chmod(dirpath, 0o755)
