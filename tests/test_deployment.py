"""A kernel cache shipped to a machine without a C++ compiler: a process records what it used
(TILEJIT_CACHE_RECORD), `export --keys` ships exactly that, and a process whose PATH has no
compiler (and whose CXX points nowhere), in strict mode, imports the archive and runs the cpu and
Kunlun-emulation kernels from it with no build; what is missing is an error naming the kernel,
its specialisation and how to pre-build it, from the launch line alone."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from compiler.cache import cli as cache_cli

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]

KERNEL = textwrap.dedent("""
    from compiler import kernel, language as tl

    @kernel
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)
""")

# where the cache is built: the cpu and the Kunlun-emulation kernel, recorded
BUILD = textwrap.dedent("""
    import torch, compiler
    from deploy_kernel import add_one
    x = torch.arange(100, dtype=torch.float32)
    for target in ("cpu", "kunlun:xpu3"):
        out = torch.empty_like(x)
        with compiler.use_target(target):
            add_one[(2,)](x, out, 100, BLOCK=64)
        assert torch.equal(out, x + 1)
""")

# where it is deployed: no compiler; import, run, then ask for what is not there
DEPLOY = textwrap.dedent("""
    import json, os, sys, traceback
    import torch, compiler
    from compiler import fastpath
    from compiler.cache import STATS, KernelCache
    from compiler.cache.archive import import_cache
    from deploy_kernel import add_one

    res = import_cache(KernelCache(), sys.argv[1])
    out = {"imported": len(res["imported"]), "unchecked": res["unchecked"], "problems": res["problems"]}
    x = torch.arange(100, dtype=torch.float32)
    for target in ("cpu", "kunlun:xpu3"):
        y = torch.empty_like(x)
        with compiler.use_target(target):
            add_one[(2,)](x, y, 100, BLOCK=64)
        out[target] = bool(torch.equal(y, x + 1))
    out["stats"] = STATS.as_dict()
    out["fast_launch"] = fastpath.fast_module() is not None

    def miss():
        try:
            add_one[(1,)](x, torch.empty_like(x), 100, BLOCK=128)
        except Exception as e:
            frames = [f.filename for f in traceback.extract_tb(e.__traceback__)]
            return type(e).__name__, str(e), frames
    out["strict"] = miss()
    del os.environ["TILEJIT_CACHE_STRICT"]
    out["no_compiler"] = miss()
    print(json.dumps(out))
""")


def _run(script: pathlib.Path, cwd: pathlib.Path, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_shipped_cache_runs_without_a_compiler_in_strict_mode(tmp_path):
    (tmp_path / "deploy_kernel.py").write_text(KERNEL)
    (tmp_path / "build.py").write_text(BUILD)
    (tmp_path / "deploy.py").write_text(DEPLOY)
    built, record = tmp_path / "built", tmp_path / "used-keys.txt"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_") and k not in ("CXX", "CC")}
    base["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{REPO}"
    # the launch path's module goes to this cache too, so that it is recorded and shipped
    res = _run(tmp_path / "build.py", tmp_path, {**base, "TILEJIT_CACHE_DIR": str(built),
                                                  "TILEJIT_CACHE_RECORD": str(record)})
    assert res.returncode == 0, res.stderr
    lines = record.read_text().splitlines()
    assert sorted(line.split()[2] for line in lines) == ["-", "cpu", "kunlun:xpu3"], lines

    archive = tmp_path / "deploy.tar.gz"
    assert cache_cli.main(["export", str(archive), "--keys", str(record), "--cache-dir", str(built)]) == 0

    no_compiler = tmp_path / "bin"   # PATH holds no compiler at all; CXX names one that does not exist
    no_compiler.mkdir()
    env = {**base, "PATH": str(no_compiler), "CXX": str(tmp_path / "no-such-g++"), "TILEJIT_CACHE_STRICT": "1",
           "TILEJIT_CACHE_DIR": str(tmp_path / "deployed")}
    res = _run(tmp_path / "deploy.py", tmp_path, env, str(archive))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["imported"] == 3 and not out["problems"]
    assert any("cxx of its fingerprint cannot be checked here" in u for u in out["unchecked"]), out["unchecked"]
    assert out["cpu"] and out["kunlun:xpu3"]
    assert out["stats"]["builds"] == 0 and out["stats"]["disk_hits"] == 2
    assert out["fast_launch"]   # the compiled launch path's module came with the archive

    kind, msg, frames = out["strict"]
    assert kind == "CacheMissError"
    assert msg.startswith("TILEJIT_CACHE_STRICT=1: kernel 'add_one' for target cpu, policy fast, specialised as "
                          "add_one(x_ptr: *fp32, out_ptr: *fp32, n: int32, BLOCK=128) is not in "
                          "the kernel cache"), msg
    assert "add_one(x_ptr: *fp32, out_ptr: *fp32, n: int32, BLOCK=64) for cpu, policy fast" in msg
    assert "TILEJIT_CACHE_RECORD=used-keys.txt" in msg and "export tilejit-cache.tar.gz --keys" in msg
    assert frames == [str(tmp_path / "deploy.py")], frames   # the launch line alone: no frame of the compiler

    kind, msg, frames = out["no_compiler"]
    assert kind == "ToolchainMissingError"
    assert "this machine cannot build it: CXX=" in msg and "no-such-g++" in msg
    assert "Kernels already in the cache run without a compiler." in msg
    assert all(not f.startswith(str(REPO / "compiler")) for f in frames), frames
