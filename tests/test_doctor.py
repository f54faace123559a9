"""`python -m compiler.doctor`: what works here, what does not, and an exit status that is 1 only
when the default target (cpu) is broken."""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from compiler import doctor as doctor_module

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]


def doctor(*args, cwd=REPO, pythonpath=str(REPO), **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": pythonpath, **env}
    if "CXX" not in env:
        full.pop("CXX", None)
    return subprocess.run([sys.executable, "-m", "compiler.doctor", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


def _rows(res) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in json.loads(res.stdout):
        out.setdefault(r["what"], []).append(r)
    return out


@pytest.mark.integration
def test_a_working_machine_exits_0_and_says_what_it_checked(tmp_path):
    cache = tmp_path / "cache"
    res = doctor(TILEJIT_CACHE_DIR=str(cache))
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"^  ok\s+cpu target\s+a test kernel compiled \(C\+\+ with OpenMP\), loaded and computed the "
                     r"right result$", res.stdout, re.M), res.stdout
    assert res.stdout.rstrip().splitlines()[-1].startswith("the default target (cpu) works here")
    for what in ("python", "C++ compiler", "torch", "triton", "gpu devices", "gpu target", "kunlun target",
                 "cache dir", "package kernels"):
        assert re.search(rf"^  (ok|info|WARN)\s+{re.escape(what)}\s", res.stdout, re.M), what
    assert not cache.exists() or not any(cache.iterdir())      # the test kernel used a private cache
    rows = _rows(doctor("--json", TILEJIT_CACHE_DIR=str(cache)))
    assert rows["triton"][0]["detail"].endswith(f"(tested range {doctor_module.tested_range('triton')})") or \
        rows["triton"][0]["status"] == "WARN"
    assert any("Kunlun" in r["detail"] or "XTDK" in r["detail"] for r in rows["kunlun target"])


@pytest.mark.integration
def test_a_missing_compiler_fails_with_its_name():
    res = doctor(CXX="no-such-clang++")
    assert res.returncode == 1
    assert re.search(r"^  FAIL\s+cpu target\s+CXX=no-such-clang\+\+ is set, but 'no-such-clang\+\+' is not an "
                     r"executable on PATH", res.stdout, re.M), res.stdout
    assert "the default target (cpu) does not work here: see the FAIL lines" in res.stdout


@pytest.mark.integration
def test_a_foreign_kernels_package_fails(tmp_path):
    (tmp_path / "foreign" / "kernels").mkdir(parents=True)
    # it would not even import (as Hugging Face's without its dependencies): it is read, never run
    (tmp_path / "foreign" / "kernels" / "__init__.py").write_text("raise ImportError('needs huggingface_hub')\n")
    res = doctor(cwd=tmp_path, pythonpath=f"{tmp_path / 'foreign'}{os.pathsep}{REPO}")
    assert res.returncode == 1
    assert re.search(rf"^  FAIL\s+package kernels\s+the package 'kernels' at "
                     rf"{re.escape(str(tmp_path / 'foreign' / 'kernels' / '__init__.py'))} is not tilejit's",
                     res.stdout, re.M), res.stdout


@pytest.mark.integration
def test_an_unsafe_cache_directory_fails(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    try:
        res = doctor(TILEJIT_CACHE_DIR=str(cache))
    finally:
        os.chmod(cache, 0o755)
    assert res.returncode == 1
    assert re.search(r"^  FAIL\s+cache dir\s+.*is world-writable \(no sticky bit\)", res.stdout, re.M), res.stdout


def test_tested_range_is_the_pyproject_pin():
    text = (REPO / "pyproject.toml").read_text()
    pin = re.search(r'"triton([^"]+)"', text).group(1)
    assert doctor_module.tested_range("triton") == pin


@pytest.mark.parametrize("version, spec, ok", [
    ("3.9.0", ">=3.9,<3.10", True), ("3.8.0", ">=3.9,<3.10", False), ("3.10.0", ">=3.9,<3.10", False),
    ("3.9.1", "==3.9.*", True), ("3.10", "==3.9.*", False), ("2.4.0", ">=2.4", True), ("2.3.1", ">=2.4", False),
])
def test_version_ranges(version, spec, ok):
    assert doctor_module.satisfies(version, spec) is ok
