"""Target plugins: metadata, version checks, `python -m targets`, and a toy target package that is
installed through its own entry point and runs a kernel with no edit to compiler/, kernels/ or
runtime/."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import compiler
import targets.cpu
from compiler.errors import TargetError
from compiler.target import TargetPlugin
from compiler.target import requirements as plugins
from compiler.target.requirements import PluginVersionError, Requirement, parse_version

pytestmark = pytest.mark.no_toolchain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "tests", "toy_target")


@pytest.fixture(autouse=True)
def _restore_registry():
    """Plugins registered by a test (fakes) are gone after it, so other tests see the usual list."""
    from compiler import target
    target._discover()
    saved = dict(target._plugins), dict(target._plugin_refs)
    yield
    target._plugins.clear()
    target._plugins.update(saved[0])
    target._plugin_refs.clear()
    target._plugin_refs.update(saved[1])
    target._instances.clear()


def test_parse_version():
    assert parse_version("g++ (Debian 12.2.0-14+deb12u1) 12.2.0 at /usr/bin/g++") == (12, 2, 0, 0)
    assert parse_version("clang version 14.0.6") == (14, 0, 6, 0)
    assert parse_version("g++ (GCC) 9 20190503") == (9, 0, 0, 0)
    assert parse_version("12") == parse_version("12.0")
    assert parse_version("no digits") is None and parse_version(None) is None


class _Fake(TargetPlugin):
    version = "1.2"
    calls = 0

    def __init__(self, minimum, found):
        def probe():
            type(self).calls += 1
            return found
        self.requirements = (Requirement("frobnicator", minimum, probe, hint="upgrade it"),)

    def create(self, variant):
        return targets.cpu.CPUTarget()


def test_version_check_message_and_cache():
    _Fake.calls = 0
    old = _Fake("3.1", "frob 3.0.9 at /opt/frob")
    with pytest.raises(PluginVersionError) as e:
        plugins.check("fake_old", old)
    msg = str(e.value)
    # one message: the plugin, the requirement, what was found and what to do
    assert msg == ("target plugin 'fake_old' 1.2 requires frobnicator >= 3.1, but found frob 3.0.9 at /opt/frob; "
                   "upgrade it")
    with pytest.raises(PluginVersionError):
        plugins.check("fake_old", old)
    assert _Fake.calls == 1          # probed once per plugin
    missing = _Fake("1.0", None)
    assert "but found none" in plugins.availability("fake_missing", missing)[1]
    plugins.check("fake_ok", _Fake("3.0", "frob 3.0"))   # equal versions pass


def test_unmet_requirement_refused_by_get_target():
    compiler.register_target("fake_refused", _Fake("99", "frob 1.0"))
    with pytest.raises(TargetError, match=r"target plugin 'fake_refused' 1\.2 requires frobnicator >= 99"):
        compiler.get_target("fake_refused")
    assert "fake_refused" not in compiler.available_targets()


def test_register_twice_is_harmless():
    for _ in range(2):
        compiler.register_target("cpu", targets.cpu.TARGET)
        compiler.register_target("cpu", "targets.cpu:TARGET")
    assert compiler.get_target("cpu").name == "cpu"
    assert compiler.target.target_names().count("cpu") == 1


def test_plugin_without_create_is_refused():
    with pytest.raises(TargetError, match="no create"):
        plugins.info("junk", object())


def test_cpu_plugin_metadata():
    meta = plugins.info("cpu", targets.cpu.TARGET)
    assert meta.name == "cpu" and meta.device_kinds == ("cpu",) and meta.requirements
    (req, ok, found), = plugins.requirement_report(targets.cpu.TARGET)
    assert req.what == "C++ compiler" and ok and re.search(r"\d+\.\d+", found)


def _install_toy(dest: str) -> None:
    """Installs the toy distribution into `dest` the way pip lays out site-packages: the package
    plus a .dist-info whose entry_points.txt comes from the toy's pyproject.toml."""
    shutil.copytree(os.path.join(TOY, "tilejit_toy"), os.path.join(dest, "tilejit_toy"))
    with open(os.path.join(TOY, "pyproject.toml")) as f:
        text = f.read()
    name = re.search(r'^name = "([^"]+)"', text, re.M).group(1)
    version = re.search(r'^version = "([^"]+)"', text, re.M).group(1)
    section = text.split('[project.entry-points."tilejit.targets"]', 1)[1].split("\n[", 1)[0]
    eps = [line.strip() for line in section.strip().splitlines() if "=" in line and not line.startswith("#")]
    info = os.path.join(dest, f"{name.replace('-', '_')}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[tilejit.targets]\n" + "\n".join(e.replace('"', "") for e in eps) + "\n")


TOY_SCRIPT = textwrap.dedent('''
    import io, contextlib
    from importlib import metadata
    import torch
    import compiler
    from compiler import kernel, cdiv, language as tl
    from compiler.errors import TargetError

    eps = {ep.name: ep for ep in metadata.entry_points(group="tilejit.targets")}
    assert eps["toy"].value == "tilejit_toy:TARGET" and eps["toy"].dist.name == "tilejit-toy-target", eps
    assert "toy" in compiler.available_targets() and "toy_future" not in compiler.available_targets()

    @kernel
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.zeros(1000)
    with compiler.use_target("toy"):
        axpy[(cdiv(1000, 128),)](x, y, out, 2.5, 1000, BLOCK=128)
    import tilejit_toy
    assert tilejit_toy.built == ["axpy"], tilejit_toy.built
    assert torch.allclose(out, 2.5 * x + y), "wrong result on toy"
    # registering the same plugin again (by reference and by object) changes nothing
    compiler.register_target("toy", "tilejit_toy:TARGET")
    compiler.register_target("toy", tilejit_toy.TARGET)
    with compiler.use_target("toy"):
        axpy[(cdiv(1000, 128),)](x, y, out, 2.5, 1000, BLOCK=128)
    assert tilejit_toy.built == ["axpy"]    # served from the cache

    # the device backend comes from the plugin too
    from runtime.device import get_device
    dev = get_device("toy")
    assert type(dev).__name__ == "ToyDevice" and dev.properties().name.startswith("toy on")
    buf = dev.malloc(4000)
    dev.memcpy(buf, x)
    back = torch.empty(1000)
    dev.memcpy(back, buf)
    assert torch.equal(back, x)

    try:
        compiler.get_target("toy_future")
    except TargetError as e:
        print("REFUSED:", e)
    else:
        raise AssertionError("toy_future was not refused")

    from targets.__main__ import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["-v"])
    print(buf.getvalue())
    print("TOY OK")
''')


@pytest.mark.integration
def test_toy_target_through_its_own_entry_point(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_toy(str(site))
    script = tmp_path / "toy_run.py"
    script.write_text(TOY_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), ROOT]), TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                         cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "TOY OK" in out
    refused = re.search(r"REFUSED: (.*)", out).group(1)
    assert re.fullmatch(r"target plugin 'toy_future' 0\.0\.1 requires C\+\+ compiler >= 999\.1, but found "
                        r".*\d+\.\d+.* at .*; toy_future needs a compiler from the future; use the 'toy' target",
                        refused), refused
    listing = out.split("TOY OK")[0]
    assert re.search(r"^toy\s+0\.0\.1\s+available$", listing, re.M), listing
    assert re.search(r"^toy_future\s+0\.0\.1\s+not available: target plugin 'toy_future'", listing, re.M), listing
    assert "entry point tilejit_toy:TARGET of tilejit-toy-target 0.0.1" in listing
    assert re.search(r"^cpu\s+\S+\s+available$", listing, re.M), listing


@pytest.mark.integration
def test_python_m_targets_lists_cpu():
    res = subprocess.run([sys.executable, "-m", "targets", "--json"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    import json
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["cpu"]["available"] is True and rows["cpu"]["requirements"][0]["ok"] is True
