"""`python -m compiler.cache export` by selection (--target, --kernel, --op, --since, --keys), the
TILEJIT_CACHE_RECORD manifest it reads, and what `import` and `stats` say about each kernel."""
from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import tarfile
import time

import pytest

from compiler.cache import KernelCache, cli, usage
from compiler.cache.select import parse_since
from compiler.cache.store import LAUNCH_PATH, MANIFEST

pytestmark = pytest.mark.no_toolchain

DAY = 86400


def _entry(cache: KernelCache, n: int, target, kernel: str, op=None, age_days: float = 0.0) -> str:
    key = f"{n:02x}" + "0" * 62

    def build(d: pathlib.Path) -> dict:
        (d / "kernel.so").write_bytes(b"binary %d" % n)
        return {"kernel": kernel, "target": target, **({"op": op} if op else {})}
    cache.get_or_build(key, build)
    when = time.time() - age_days * DAY
    os.utime(cache.entry_dir(key) / MANIFEST, (when, when))
    return key


def _decisions(root: pathlib.Path, op: str, target: str, age_days: float = 0.0) -> str:
    d = root / "autotune"
    d.mkdir(parents=True, exist_ok=True)
    name = f"{op}.{target.replace(':', '_')}.{'0' * 16}.fast.json"
    (d / name).write_text(json.dumps({"format": 1, "op": op, "target": target, "fingerprint_hash": "0" * 16,
                                      "policy": "fast", "entries": {}}))
    when = time.time() - age_days * DAY
    os.utime(d / name, (when, when))
    return name


@pytest.fixture
def mixed(tmp_path):
    """426 entries in the issue's story; here: cpu and kunlun kernels of two ops, an old one, the
    launch path's module, and decision files of both targets."""
    cache = KernelCache(tmp_path / "c")
    keys = {"rms_cpu": _entry(cache, 1, "cpu", "rms_norm_kernel", op="rms_norm"),
            "ln_cpu": _entry(cache, 2, "cpu", "layer_norm_kernel", op="layer_norm"),
            "rms_xpu3": _entry(cache, 3, "kunlun:xpu3", "rms_norm_kernel", op="rms_norm"),
            "rms_xpu2": _entry(cache, 4, "kunlun:xpu2", "rms_norm_kernel", op="rms_norm"),
            "old_cpu": _entry(cache, 5, "cpu", "experiment", age_days=30),
            "launch_path": _entry(cache, 6, None, LAUNCH_PATH)}
    dec = {"rms_cpu": _decisions(cache.root, "rms_norm", "cpu"),
           "rms_xpu3": _decisions(cache.root, "rms_norm", "kunlun:xpu3"),
           "ln_cpu_old": _decisions(cache.root, "layer_norm", "cpu", age_days=30)}
    return cache, keys, dec


def _export(cache: KernelCache, tmp_path, *args) -> tuple[set, set, str]:
    archive = tmp_path / "out.tar.gz"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["export", str(archive), "--cache-dir", str(cache.root), *args]) == 0
    with tarfile.open(archive) as tar:
        man = json.load(tar.extractfile(MANIFEST))
    return set(man["entries"]), set(man["decisions"]), out.getvalue()


def test_export_selects_by_target_kernel_op_and_age(mixed, tmp_path):
    cache, k, d = mixed
    ents, decs, text = _export(cache, tmp_path, "--target", "cpu")
    assert ents == {k["rms_cpu"], k["ln_cpu"], k["old_cpu"], k["launch_path"]}
    assert decs == {d["rms_cpu"], d["ln_cpu_old"]}
    assert text.startswith("exported 3 kernel entries (cpu 3), 2 decision files and the compiled launch path's "
                           "module to "), text
    assert "left out: 2 entries and 1 decision file the selection does not take" in text

    ents, decs, _ = _export(cache, tmp_path, "--target", "kunlun")   # every arch of the family
    assert ents == {k["rms_xpu3"], k["rms_xpu2"], k["launch_path"]} and decs == {d["rms_xpu3"]}
    ents, decs, _ = _export(cache, tmp_path, "--target", "kunlun:xpu3")
    assert ents == {k["rms_xpu3"], k["launch_path"]} and decs == {d["rms_xpu3"]}

    # a kernel name (glob) takes kernel entries only; an op takes its decisions and what was built for it
    ents, decs, _ = _export(cache, tmp_path, "--kernel", "rms*", "--target", "cpu,kunlun:xpu3")
    assert ents == {k["rms_cpu"], k["rms_xpu3"], k["launch_path"]} and decs == set()
    ents, decs, _ = _export(cache, tmp_path, "--op", "rms_norm", "--target", "cpu")
    assert ents == {k["rms_cpu"], k["launch_path"]} and decs == {d["rms_cpu"]}

    ents, decs, text = _export(cache, tmp_path, "--since", "7d")
    assert k["old_cpu"] not in ents and len(ents) == 5 and d["ln_cpu_old"] not in decs and len(decs) == 2
    assert "--since " in text

    # nothing selected: not even the launch path's module, which only goes with kernels
    ents, decs, text = _export(cache, tmp_path, "--kernel", "nothing*")
    assert ents == set() and decs == set() and text.startswith("exported 0 kernel entries and 0 decision files")


def test_a_recorded_manifest_exports_exactly_what_was_used(mixed, tmp_path, monkeypatch):
    cache, k, d = mixed
    record = tmp_path / "used.txt"
    monkeypatch.setenv(usage.ENV, str(record))
    for key in (k["rms_cpu"], k["launch_path"], k["rms_cpu"]):   # a key used twice is listed once
        assert KernelCache(cache.root).lookup(key) is not None
    usage.note_decisions(d["rms_cpu"])
    lines = record.read_text().splitlines()
    assert lines == [f"entry {k['rms_cpu']} cpu rms_norm_kernel",
                     f"entry {k['launch_path']} - tilejit_compiled_launch_path",
                     f"decisions {d['rms_cpu']}"]
    assert {k["rms_cpu"], k["launch_path"], f"decisions/{d['rms_cpu']}"} <= usage.used()
    ents, decs, _ = _export(cache, tmp_path, "--keys", str(record))
    assert ents == {k["rms_cpu"], k["launch_path"]} and decs == {d["rms_cpu"]}


def test_import_into_an_empty_directory_says_what_happened_to_each_kernel(mixed, tmp_path):
    cache, k, d = mixed
    _export(cache, tmp_path, "--target", "cpu")
    dst = tmp_path / "dst"

    def run(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert cli.main(["import", str(tmp_path / "out.tar.gz"), "--cache-dir", str(dst), "--force", *args]) == 0
        return out.getvalue()
    text = run()
    assert text.startswith("imported 3 kernel entries (cpu 3), 2 decision files and the compiled launch path's "
                           f"module into {dst}"), text
    assert "already there" not in text
    text = run("-v")
    assert "  cpu          rms_norm_kernel                  1 already there (kept)" in text
    assert "  launch-path  tilejit compiled launch path     1 already there (kept)" in text
    assert f"  decisions    {d['rms_cpu']}" in text
    assert text.rstrip().endswith("already there, kept: 3 kernel entries (cpu 3), 2 decision files and the compiled "
                                  "launch path's module")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["stats", "--cache-dir", str(dst)])
    rows = out.getvalue().splitlines()
    assert any(r.split()[:3] == ["cpu", "3", "entries"] and r.endswith("3 kernels") for r in rows), rows
    assert any(r.split()[0] == "launch-path" for r in rows) and not any(r.split()[0] == "-" for r in rows), rows


def test_since_takes_durations_and_dates():
    now = 1_000_000.0
    assert parse_since("90m", now) == now - 5400 and parse_since("2w", now) == now - 14 * DAY
    assert parse_since("2025-01-31") < time.time()
    with pytest.raises(Exception, match="give a duration"):
        parse_since("yesterday")
