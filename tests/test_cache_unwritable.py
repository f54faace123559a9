"""Launches whose kernel cache cannot take the kernel: a full disk (ENOSPC injected where the build
writes: kernel.cpp, the compiler's output, the manifest; and, where root may mount one, a real
full tmpfs) and a read-only cache directory. Each launch still runs, with one warning naming the
cache; nothing is left in the cache, `python -m compiler.cache verify` reports it as it is, and
a later process with room builds there as usual."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import torch

import compiler.jit
import targets.cpu
from compiler import kernel, language as tl
from compiler.cache import cli as cache_cli, unwritable

pytestmark = pytest.mark.compile
NO_SPACE = os.strerror(errno.ENOSPC)


@kernel
def scale(x_ptr, o_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * FACTOR, mask=m)


def _launch(factor: float) -> bool:
    """A launch that needs a kernel no test has built (FACTOR is part of its cache key)."""
    x = torch.arange(10, dtype=torch.float32)
    o = torch.empty(10)
    scale[(1,)](x, o, 10, FACTOR=factor, BLOCK=16)
    return torch.equal(o, x * factor)


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("TILEJIT_CACHE_STRICT", raising=False)
    return root


def _warning(root, reason_re: str) -> str:
    """The fallback warning as a regular expression (the reason's variable part given as one)."""
    private = unwritable._private["cache"].root
    return (re.escape(f"tilejit cache: cannot write to the kernel cache {root} (") + reason_re
            + re.escape(f"); this process compiles its kernels into {private} instead, removed when it exits (the "
                        "next process compiles them again). Free space there, or point TILEJIT_CACHE_DIR at a "
                        "writable directory."))


def _verify(root) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cache_cli.main(["verify", "--cache-dir", str(root)])
    return rc, out.getvalue()


def _left_in(root) -> list[str]:
    """What the cache holds besides its lock files."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.parts[len(root.parts)] != "locks")


def _as_a_new_process(root, monkeypatch) -> None:
    """Forget this process's cache object and compiled kernels, as a new process starts without them."""
    monkeypatch.setattr(compiler.jit, "_caches", {})
    scale.compiled.clear()


def _full_at(monkeypatch, root, where: str) -> None:
    """Every write to `where` under `root` fails as on a full disk."""
    if where == "kernel.cpp":   # the first file a cpu build writes
        def fake_open(path, mode="r", *a, **kw):
            if str(path).startswith(str(root)) and "w" in mode:
                raise OSError(errno.ENOSPC, NO_SPACE, str(path))
            return open(path, mode, *a, **kw)
        monkeypatch.setattr(targets.cpu, "open", fake_open, raising=False)
    else:                       # the manifest, written last, after the compiler succeeded
        real = pathlib.Path.write_text

        def fake_write_text(self, *a, **kw):
            if str(self).startswith(str(root)) and self.name == ".manifest.json.part":
                raise OSError(errno.ENOSPC, NO_SPACE, str(self))
            return real(self, *a, **kw)
        monkeypatch.setattr(pathlib.Path, "write_text", fake_write_text)


@pytest.mark.parametrize("where, factor", [("kernel.cpp", 3.0), ("manifest", 5.0)])
def test_a_full_disk_runs_the_launch_with_one_warning_and_leaves_nothing(cache_root, monkeypatch, caplog,
                                                                         where, factor):
    _full_at(monkeypatch, cache_root, where)
    with caplog.at_level("WARNING", logger="compiler.cache"):
        assert _launch(factor)
        assert _launch(factor + 1)        # a second kernel: built privately too, no second warning
    (msg,) = [r.getMessage() for r in caplog.records]
    name = "kernel.cpp" if where == "kernel.cpp" else ".manifest.json.part"
    reason = (re.escape(f"[Errno 28] {NO_SPACE}: '{cache_root}/tmp/") + r"[0-9a-f]{64}\.\w+\.build/"
              + re.escape(name + "'"))
    assert re.fullmatch(_warning(cache_root, reason), msg), msg
    assert _left_in(cache_root) == ["tmp"] and not any((cache_root / "tmp").iterdir())
    assert _verify(cache_root) == (0, f"0 ok, 0 bad in {cache_root}\n")
    monkeypatch.undo()                    # room again: a new process builds into the cache
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(cache_root))
    _as_a_new_process(cache_root, monkeypatch)
    assert _launch(factor)
    assert _verify(cache_root) == (0, f"1 ok, 0 bad in {cache_root}\n")


def test_the_compiler_running_out_of_space_runs_the_launch_elsewhere(cache_root, monkeypatch, caplog, tmp_path):
    """The C++ compiler fails to write its output under the cache (what g++ prints on a full disk)."""
    cxx = tmp_path / "full-g++"
    cxx.write_text(f"""#!/bin/sh
case "$*" in
  *--version*) exec g++ "$@" ;;
  *{cache_root}*) echo "cc1plus: fatal error: error writing to {cache_root}/tmp/ccXYZ.s: {NO_SPACE}" >&2; exit 1 ;;
esac
exec g++ "$@"
""")
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    with caplog.at_level("WARNING", logger="compiler.cache"):
        assert _launch(7.0)
    (msg,) = [r.getMessage() for r in caplog.records]
    reason = re.escape(f"cc1plus: fatal error: error writing to {cache_root}/tmp/ccXYZ.s: {NO_SPACE}")
    assert re.fullmatch(_warning(cache_root, reason), msg), msg
    assert _left_in(cache_root) == ["tmp"] and _verify(cache_root)[0] == 0


def test_a_read_only_cache_serves_what_it_has_and_compiles_the_rest_privately(cache_root, monkeypatch, caplog):
    assert _launch(11.0)                  # an entry the cache holds
    before = _left_in(cache_root)
    for name in ("locks", "tmp"):         # unwritable, also as root: files where directories go
        shutil.rmtree(cache_root / name)
        (cache_root / name).write_text("not a directory")
    _as_a_new_process(cache_root, monkeypatch)
    with caplog.at_level("WARNING", logger="compiler.cache"):
        assert _launch(11.0)              # served from the cache, no warning
        assert not caplog.records
        assert _launch(13.0) and _launch(17.0)
    (msg,) = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(_warning(cache_root, re.escape(f"[Errno 17] File exists: '{cache_root}/locks'")), msg), msg
    assert _left_in(cache_root) == before
    assert _verify(cache_root) == (0, f"1 ok, 0 bad in {cache_root}\n")


def _mount_tmpfs(path: pathlib.Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.integration
@pytest.mark.parametrize("left", [0, 8192])
def test_a_real_full_tmpfs(tmp_path, monkeypatch, caplog, left):
    """A 1 MiB tmpfs filled to `left` bytes free (root only: elsewhere the injected cases stand in)."""
    root = tmp_path / "tmpfs"
    if not _mount_tmpfs(root, "1m"):
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    try:
        free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
        with open(root / "filler", "wb") as f:
            f.write(b"\0" * max(free - left, 0))
        monkeypatch.setenv("TILEJIT_CACHE_DIR", str(root / "cache"))
        with caplog.at_level("WARNING", logger="compiler.cache"):
            assert _launch(19.0 + left)
        (msg,) = [r.getMessage() for r in caplog.records]
        assert f"cannot write to the kernel cache {root / 'cache'} (" in msg and NO_SPACE in msg, msg
        assert _left_in(root / "cache") == ["tmp"] and _verify(root / "cache")[0] == 0
    finally:
        subprocess.run(["umount", str(root)], check=False)
