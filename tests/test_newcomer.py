"""A new user's first hour, as a test: a clone of the repository in a temporary directory (the
tracked files, as they are in the working tree), then, as the user would run them:

- every command of the bash blocks of the README and of the pages that hold the commands a user
  types (COMMAND_PAGES: the configuration reference and the cache page), in order, in a plain
  shell: the quick start's scripts create and install `.venv`, `source .venv/bin/activate`
  activates it for the commands after it; the README's Install block is the slow tier's (below);
- the README's kernel example (its Python block), as a file;
- every script in examples/ and benchmarks/ run as a file from another directory, with --help or
  its quick mode.

To stay fast, the clone's `.venv` reuses this interpreter's installed packages: it is created
without packages and a .pth file points it at a view of this environment's site-packages that
leaves out tilejit's own install. scripts/env.sh then runs as it does for a user (torch's CPU
build and tilejit, editable, from the clone), finding torch and triton already there. The two
long quick-start commands get the arguments the README gives for a short run (`--quick`, pytest
arguments). The kernel cache starts as a copy of the test session's.

The slow tier (`bash scripts/test.sh --all`, as .ci/run runs it) has the README's commands above
(about a minute: the quick start installs `.venv`), and follows the README's Install section in a
fresh environment with nothing reused: torch's CPU build, `pip install .`, then checks that no
CUDA wheel came, that the installed package works outside the checkout, and that a foreign
`kernels` installed over it is reported with the fix.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]
# the README first (its quick start installs .venv), then the docs pages of commands as written
COMMAND_PAGES = ("README.md", "docs/configuration.md", "docs/cache.md")
# the quick start's two long commands, with the arguments the README gives for a short run
SHORT_RUN = {"bash scripts/demo.sh": "bash scripts/demo.sh --quick --kernels rms_norm",
             "bash scripts/test.sh": "bash scripts/test.sh tests/test_inspect.py"}
# other commands of minutes, run here in their quick form
LONG_RUN = {"python -m compiler.autotune --target kunlun": "python -m compiler.autotune --target kunlun --quick"}
# scripts run as files: their quick mode where it is cheap, else --help
# (examples/demo.py runs as a file among the README's commands already)
QUICK_MODE = {
    "benchmarks/accuracy.py": ["--quick", "--kernels", "rms_norm", "--dtypes", "fp32", "--policies", "fast"],
    "benchmarks/kunlun_cost.py": ["--arch", "xpu2"],
    "benchmarks/dispatch.py": ["--calls", "200", "--repeat", "1"],
}


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing to clone")
    return [f for f in out.stdout.split("\0") if f and (REPO / f).is_file()]


def clone_to(dst: pathlib.Path) -> pathlib.Path:
    """The tracked files as they are in the working tree (what a clone of a commit of them holds)."""
    for f in _tracked_files():
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, dst / f)
    return dst


def _user_env(tmp: pathlib.Path, cache: pathlib.Path) -> dict:
    """A plain shell's environment: nothing of this test process's Python, tilejit's cache apart."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TILEJIT_", "PYTHON", "VIRTUAL_ENV", "PYTEST")) and k not in ("CXX",)}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)]
    env.update(PATH=os.pathsep.join(path), TILEJIT_CACHE_DIR=str(cache))
    return env


def _reuse_this_environment(venv: pathlib.Path, view: pathlib.Path) -> None:
    """An empty .venv that sees this interpreter's packages, except tilejit's own install."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    view.mkdir()
    for entry in pathlib.Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        if name.endswith(".pth") or "tilejit" in name or name == "__pycache__":
            continue
        (view / entry.name).symlink_to(entry)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "_reuse_test_environment.pth").write_text(f"{view}\n")


def readme_blocks(readme: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", readme, re.S | re.M)


def readme_commands(readme: str) -> tuple[list[str], list[str]]:
    """(the commands of every bash block but Install's, Install's), continuation lines joined."""
    commands, install = [], []
    for block in readme_blocks(readme, "bash"):
        lines = [ln for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]
        (install if any("pip install ." in ln for ln in lines) else commands).extend(lines)
    return commands, install


def _sh(command: str, cwd, env, activate: bool, timeout: int = 900) -> subprocess.CompletedProcess:
    script = ("source .venv/bin/activate\n" if activate else "") + command
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _report(cmd: str, res: subprocess.CompletedProcess) -> str:
    return f"$ {cmd}\nexit {res.returncode}\n--- stdout\n{res.stdout[-3000:]}\n--- stderr\n{res.stderr[-3000:]}"


def _new_clone(tmp_path_factory, cache_dir):
    base = tmp_path_factory.mktemp("newcomer")
    repo = clone_to(base / "tilejit")
    cache = base / "cache"
    shutil.copytree(cache_dir, cache, ignore=shutil.ignore_patterns("locks", "tmp"))
    _reuse_this_environment(repo / ".venv", base / "site-view")
    return repo, _user_env(base, cache), base


@pytest.fixture(scope="module")
def clone(tmp_path_factory, cache_dir):
    """A clone whose `.venv` the quick start's scripts have set up (as their first run does)."""
    repo, env, base = _new_clone(tmp_path_factory, cache_dir)
    res = _sh("bash scripts/run.sh true", repo, env, False)
    assert res.returncode == 0, _report("bash scripts/run.sh true", res)
    return repo, env, base


@pytest.mark.slow    # about a minute: the quick start installs .venv and runs the demo and a test file
def test_readme_commands_run_as_written(tmp_path_factory, cache_dir):
    repo, env, _ = _new_clone(tmp_path_factory, cache_dir)
    pages = [readme_commands((repo / page).read_text()) for page in COMMAND_PAGES]
    commands, install = [c for cmds, _ in pages for c in cmds], pages[0][1]
    assert all(cmds for cmds, _ in pages[1:]), "a page of COMMAND_PAGES shows no command"
    assert install and [c.split("#")[0].strip() for c in commands[:2]] == list(SHORT_RUN), "quick start first"
    assert "source .venv/bin/activate" in commands
    active = False
    for cmd in commands:
        run = {**SHORT_RUN, **LONG_RUN}.get(cmd.split("#")[0].strip(), cmd)
        res = _sh(run, repo, env, active)
        assert res.returncode == 0, _report(run, res)
        active = active or cmd.strip().startswith("source .venv/bin/activate")
    # the quick start installed tilejit into .venv, editable, from the clone
    res = _sh("python -c 'import compiler, torch; print(compiler.__file__); print(torch.__version__)'", repo, env, True)
    assert res.stdout.splitlines()[0] == str(repo / "compiler" / "__init__.py"), res.stdout
    assert (repo / ".venv" / ".tilejit-installed").is_file()


def test_readme_kernel_example_runs(clone):
    repo, env, base = clone
    block = next(b for b in readme_blocks((repo / "README.md").read_text(), "python") if "@kernel" in b)
    script = base / "readme_kernel.py"
    script.write_text(block + "\nassert torch.allclose(out, x + y)\nprint('ok')\n")
    res = subprocess.run([str(repo / ".venv" / "bin" / "python"), str(script)], cwd=base, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", _report(str(script), res)


SCRIPTS = sorted(str(p.relative_to(REPO)) for d in ("examples", "benchmarks") for p in (REPO / d).glob("*.py")
                 if "__main__" in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_runs_as_a_file(clone, script):
    """From another directory, with .venv's python: nothing of the library is shadowed by a
    neighbour module, and the script's own imports resolve."""
    repo, env, base = clone
    args = QUICK_MODE.get(script, ["--help"])
    cmd = [str(repo / ".venv" / "bin" / "python"), str(repo / script), *args]
    res = subprocess.run(cmd, cwd=base, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, _report(" ".join(cmd), res)
    assert "Traceback" not in res.stderr, _report(" ".join(cmd), res)


# ---------------------------------------------------------------------------- the slow tier
@pytest.mark.slow
def test_fresh_install_follows_the_readme(tmp_path):
    repo = clone_to(tmp_path / "tilejit")
    env = _user_env(tmp_path, tmp_path / "cache")
    _, install = readme_commands((repo / "README.md").read_text())
    for cmd in install:
        res = _sh(cmd, repo, env, activate=False, timeout=1500)
        assert res.returncode == 0, _report(cmd, res)
    venv = repo / re.match(r"python3 -m venv (\S+)", install[0]).group(1)
    py = str(venv / "bin" / "python")
    pkgs = {p["name"].lower(): p["version"] for p in json.loads(subprocess.run(
        [py, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, env=env).stdout)}
    assert not [p for p in pkgs if p.startswith(("nvidia", "cuda"))], pkgs
    assert pkgs["torch"].endswith("+cpu") or sys.platform == "darwin", pkgs["torch"]
    assert "tilejit" in pkgs and "triton" in pkgs
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    assert size < 2 * 2 ** 30, f"{size / 2 ** 30:.1f} GiB installed: a CUDA build came in"   # CUDA torch: > 4 GiB

    use = ("import kernels, torch\n"
           "x = torch.randn(4, 64)\n"
           "y = kernels.rms_norm(x, torch.ones(64))\n"
           "assert torch.allclose(y, kernels.rms_norm_ref(x, torch.ones(64)).float(), atol=1e-5)\n"
           "print(kernels.__file__)\n")
    res = subprocess.run([py, "-c", use], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    site = next(venv.glob("lib/python*/site-packages"))
    assert res.stdout.strip() == str(site / "kernels" / "__init__.py")      # the installed copy, not the checkout
    _foreign_kernels_is_reported(py, repo, tmp_path, env)


def _foreign_kernels_is_reported(py: str, repo, tmp_path, env) -> None:
    """Hugging Face's `kernels` (from the package index, as it is) installed over tilejit's, then removed."""
    ops = "from compiler.opspec import library_ops\nlibrary_ops()\nprint('ok')\n"
    res = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "kernels"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([py, "-c", ops], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "NameClashError: the package 'kernels' at " in res.stderr, res.stderr
    assert re.search(r"install a top-level 'kernels': kernels [\d.]+, tilejit 0\.1\.0", res.stderr), res.stderr
    assert "Fix: `pip uninstall kernels` and then reinstall tilejit" in res.stderr
    doctor = subprocess.run([py, "-m", "compiler.doctor"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert doctor.returncode == 1 and re.search(r"^  FAIL\s+package kernels", doctor.stdout, re.M), doctor.stdout
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "kernels"], env=env, check=True, capture_output=True)
    res = subprocess.run([py, "-c", ops], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "has no __init__.py: tilejit's kernels/__init__.py was deleted" in res.stderr
    subprocess.run([py, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", "."], cwd=repo, env=env,
                   check=True, capture_output=True, timeout=600)
    res = subprocess.run([py, "-c", ops], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
