"""The kernel cache seen from real `@kernel` launches in separate processes, each with
TILEJIT_CACHE_DIR pointing at a fresh directory: a second process loads what the first built,
concurrent cold processes build each kernel once, and a corrupted kernel.so is rebuilt.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
REPO = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 180

# Written to a file (the frontend reads kernel source with inspect). argv: n_peers barrier_dir
CHILD = r'''
import json, os, pathlib, sys, time
sys.path.insert(0, {repo!r})
import torch
from compiler import kernel, language as tl
from compiler.cache import STATS


@kernel
def cp_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@kernel
def cp_rowsum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(v, axis=0))


def run_add():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    out = torch.zeros(1000)
    ck = cp_add[(4,)](x, y, out, 1000, BLOCK=256)
    return torch.equal(out, x + y), ck.key


def run_rowsum():
    x = torch.randint(-8, 8, (7, 50), generator=torch.Generator().manual_seed(1)).float()
    out = torch.zeros(7)
    ck = cp_rowsum[(7,)](x, out, 50, BLOCK=64)
    return torch.equal(out, x.sum(dim=1)), ck.key  # small integers: exact in any order


n_peers, barrier = int(sys.argv[1]), pathlib.Path(sys.argv[2])
if n_peers > 1:  # start compiling together: every child waits until all have started
    (barrier / f"ready.{{os.getpid()}}").touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.glob("ready.*"))) < n_peers and time.monotonic() < deadline:
        time.sleep(0.005)
report = {{}}
for name, fn in (("cp_add", run_add), ("cp_rowsum", run_rowsum)):
    STATS.reset()
    ok, key = fn()
    report[name] = {{"ok": ok, "key": key, **STATS.as_dict()}}
print(json.dumps(report))
'''

KERNELS = ("cp_add", "cp_rowsum")


def _script(tmp_path) -> pathlib.Path:
    p = tmp_path / "cache_child.py"
    if not p.exists():
        p.write_text(CHILD.format(repo=str(REPO)))
    return p


def _spawn(tmp_path, cache, n_peers=1, barrier=None) -> subprocess.Popen:
    env = dict(os.environ, TILEJIT_CACHE_DIR=str(cache), TILEJIT_TARGET="cpu")
    return subprocess.Popen([sys.executable, str(_script(tmp_path)), str(n_peers), str(barrier or tmp_path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def _run(tmp_path, cache) -> dict:
    return _result(_spawn(tmp_path, cache))


def _same_keys(*results):
    # Keys hash the compiler's and the target's sources: an edit to them between two child
    # processes (a live checkout) changes every key, and the processes then share nothing.
    for k in KERNELS:
        keys = {r[k]["key"] for r in results}
        assert len(keys) == 1, f"{k}: cache keys differ between processes {keys}; were sources edited meanwhile?"


def test_second_process_loads_from_disk(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    for k in KERNELS:
        assert first[k]["ok"], first
        assert first[k]["builds"] == 1, first
        assert first[k]["disk_hits"] == 0, first
    assert len(list(cache.glob("[0-9a-f][0-9a-f]/*/kernel.so"))) == len(KERNELS)

    second = _run(tmp_path, cache)
    _same_keys(first, second)
    for k in KERNELS:
        assert second[k]["ok"], second
        assert second[k]["builds"] == 0, second
        assert second[k]["disk_hits"] >= 1, second
        assert second[k]["rejected"] == 0, second


def test_concurrent_cold_processes_build_once(tmp_path):
    cache = tmp_path / "cache"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_spawn(tmp_path, cache, n_peers=4, barrier=barrier) for _ in range(4)]
    try:
        results = [_result(p) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    _same_keys(*results)
    for k in KERNELS:
        assert all(r[k]["ok"] for r in results), results
        assert sum(r[k]["builds"] for r in results) == 1, [r[k] for r in results]
        # everyone else loaded the one build from disk
        assert sum(r[k]["disk_hits"] for r in results) >= 3, [r[k] for r in results]
        assert all(r[k]["rejected"] == 0 for r in results), results
    assert len(list(cache.glob("[0-9a-f][0-9a-f]/*/kernel.so"))) == len(KERNELS)


def test_corrupted_kernel_so_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    assert all(first[k]["builds"] == 1 for k in KERNELS), first
    sos = sorted(cache.glob("[0-9a-f][0-9a-f]/*/kernel.so"))
    assert len(sos) == len(KERNELS), sos
    assert {so.parent.name for so in sos} == {first[k]["key"] for k in KERNELS}
    for so in sos:
        assert so.parent.parent.name == so.parent.name[:2]  # <root>/<2 hex>/<key>/kernel.so
        data = bytearray(so.read_bytes())
        data[len(data) // 2] ^= 0x01  # one flipped bit in the middle of the binary
        so.chmod(0o644)
        so.write_bytes(bytes(data))

    second = _run(tmp_path, cache)
    _same_keys(first, second)
    for k in KERNELS:
        assert second[k]["ok"], second
        assert second[k]["builds"] == 1, second
        assert second[k]["rejected"] >= 1, second

    # the rebuilt entries are good again: a third process just loads them
    third = _run(tmp_path, cache)
    _same_keys(first, second, third)
    for k in KERNELS:
        assert third[k]["ok"] and third[k]["builds"] == 0 and third[k]["rejected"] == 0, third
