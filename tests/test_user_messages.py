"""The messages a new user meets, each pinned: tracebacks that stop at the launch (TILEJIT_DEBUG=1
shows the compiler's frames), "did you mean", a grid that is not a tuple, one argument too many,
inspect's type names and file paths, a CXX that does not exist, the unsafe-cache warning, a
foreign `kernels` package, `python -m targets` without a GPU, `--help` texts, the autotuner's
summary and --force, and the cache's counts of entries and decisions."""
from __future__ import annotations

import ast
import io
import json
import os
import pathlib
import re
import runpy
import subprocess
import sys
import textwrap
import types

import pytest
import torch

import compiler
from compiler import KernelArgumentError, kernel, language as tl
from compiler import names
from compiler.autotune import MEASURE_COUNT, format_summary, tune_ops
from compiler.cache import KernelCache, check_dir_safety
from compiler.cache.decisions import DecisionStore
from compiler.clihelp import description

from test_cache_cli import cli as _cache_cli   # the cache command in this process (tests/ is on sys.path)

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TILEJIT_TARGET": "cpu", **extra}
    for k in ("TILEJIT_DEBUG", "CXX"):
        if k not in extra:
            env.pop(k, None)
    return env


def _run(args, cwd=REPO, timeout=300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------------------- tracebacks
BAD_SCRIPT = textwrap.dedent("""
    import torch
    from compiler import kernel, language as tl

    @kernel
    def k(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, tl.exxp(x), mask=offs < n)

    k[(1,)](torch.zeros(16), 16, BLOCK=16)
""")


def _frames(stderr: str) -> list[str]:
    return re.findall(r'^  File "([^"]+)", line \d+', stderr, re.M)


def test_compilation_error_traceback_stops_at_the_launch(tmp_path):
    script = tmp_path / "user_kernel.py"
    script.write_text(BAD_SCRIPT)
    res = _run([str(script)], cwd=tmp_path, TILEJIT_CACHE_DIR=str(tmp_path / "c"))
    assert res.returncode == 1
    assert f"{script}:9:28: in kernel 'k': tl.exxp is not part of the tile language; did you mean tl.exp?" \
        in res.stderr
    frames = _frames(res.stderr)
    assert frames[0] == str(script)
    internal = [f for f in frames if f != str(script)]
    # only the launch itself (the `k[grid](...)` call and KernelFunction.run) is left of tilejit
    assert all(f.endswith(os.path.join("compiler", "jit.py")) for f in internal), res.stderr
    assert len(internal) <= 2, res.stderr
    assert "frontend.py" not in res.stderr and "During handling" not in res.stderr


def test_tilejit_debug_shows_the_compilers_frames(tmp_path):
    script = tmp_path / "user_kernel.py"
    script.write_text(BAD_SCRIPT)
    res = _run([str(script)], cwd=tmp_path, TILEJIT_CACHE_DIR=str(tmp_path / "c"), TILEJIT_DEBUG="1")
    assert res.returncode == 1 and "did you mean tl.exp?" in res.stderr
    frames = _frames(res.stderr)
    assert any(f.endswith(os.path.join("compiler", "frontend.py")) for f in frames), res.stderr
    assert len(frames) > 6


@pytest.mark.no_toolchain
def test_did_you_mean_only_for_a_close_name():
    @kernel
    def far(x_ptr):
        tl.store(x_ptr, tl.frobnicate(1.0))

    with pytest.raises(compiler.CompilationError) as e:
        far[(1,)](torch.zeros(1))
    assert "tl.frobnicate is not part of the tile language (see the supported subset in docs/language.md)" in str(e.value)
    assert "did you mean" not in str(e.value)


# ---------------------------------------------------------------------------- launch arguments
@kernel
def copy3(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@pytest.mark.no_toolchain
def test_an_int_grid_is_refused_before_anything_compiles():
    fresh = kernel(copy3.fn)
    with pytest.raises(KernelArgumentError) as e:
        fresh[4](torch.zeros(16), 16, BLOCK=16)
    assert str(e.value) == ("kernel 'copy3': the grid must be a tuple of 1 to 3 ints (or a callable returning one), "
                            "got int 4")
    assert fresh.compiled == {}            # refused before the compile, not after it
    with pytest.raises(KernelArgumentError, match="grid must be a tuple"), compiler.render_only():
        fresh[4](torch.zeros(16), 16, BLOCK=16)
    with pytest.raises(KernelArgumentError, match="grid axis 0 is float"):
        fresh[lambda meta: (1.5,)](torch.zeros(16), 16, BLOCK=16)


@pytest.mark.no_toolchain
def test_one_argument_too_many_names_the_signature():
    with pytest.raises(KernelArgumentError) as e:
        copy3[(1,)](torch.zeros(16), 16, 3, BLOCK=16)
    assert str(e.value) == ("kernel 'copy3' takes 3 arguments, got 4: 3 positional and 1 keyword (BLOCK). "
                            "Signature: copy3(x_ptr, n, BLOCK: tl.constexpr)")
    with pytest.raises(KernelArgumentError) as e:
        copy3[(1,)](torch.zeros(16), 16, 16, 7)
    assert "takes 3 arguments, got 4: 4 positional" in str(e.value)
    with pytest.raises(KernelArgumentError) as e:       # a real duplicate keeps Python's wording
        copy3[(1,)](torch.zeros(16), 16, n=16)
    assert "multiple values for argument 'n'" in str(e.value) and "Signature: copy3(" in str(e.value)


# ---------------------------------------------------------------------------- compiler.inspect
@pytest.mark.parametrize("bad", ["*fp128", "*float", "fp16"])
def test_inspect_names_the_valid_types(bad):
    res = _run(["-m", "compiler.inspect", "examples.example_kernels:add_kernel", "-s", f"{bad},*fp32,*fp32,i32",
                "-c", "BLOCK=64"])
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (f"error: --signature: '{bad}' is not a kernel argument type; valid types are "
                                  "*fp64, *fp32, *fp16, *bf16, *i32, *i64, *i1, *i8, *i16, *fp8e5, *fp8e4nv, *u8, "
                                  "*u16, "
                                  "*u32, *u64 (tensors); i32, i64, fp32, i1 "
                                  "(scalars)")


def test_inspect_takes_a_file_path(tmp_path):
    src = tmp_path / "mine.py"
    src.write_text(textwrap.dedent("""
        from compiler import kernel, language as tl

        @kernel
        def scale(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)
    """))
    res = _run(["-m", "compiler.inspect", f"{src}:scale", "-s", "*fp32,i32", "-c", "BLOCK=32", "--stage", "ir"],
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "kernel scale(%x_ptr: *fp32, %n: int32)" in res.stdout
    res = _run(["-m", "compiler.inspect", f"{src}:nope", "-s", "*fp32,i32"], cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip() == f"error: {src}:nope: {src} defines no 'nope'"
    res = _run(["-m", "compiler.inspect", "missing.py:k"], cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip() == "error: missing.py:k: no such file 'missing.py'"


# ---------------------------------------------------------------------------- toolchain, cache safety
def test_a_cxx_that_does_not_exist_is_an_error_not_a_fallback(tmp_path):
    script = tmp_path / "ok_kernel.py"
    script.write_text(BAD_SCRIPT.replace("tl.exxp(x)", "x"))
    res = _run([str(script)], cwd=tmp_path, TILEJIT_CACHE_DIR=str(tmp_path / "c"), CXX="no-such-clang++")
    assert res.returncode == 1
    assert ("CXX=no-such-clang++ is set, but 'no-such-clang++' is not an executable on PATH; install it, point "
            "CXX at the full path of a C++ compiler, or unset CXX to use g++") in res.stderr
    assert "ToolchainMissingError: kernel 'k' for target cpu" in res.stderr   # nothing was built with another compiler
    res = _run(["-m", "targets"], CXX="no-such-clang++")
    # it still runs what the cache holds (a deployment image): builds are what the missing compiler stops
    assert re.search(r"^cpu\s+\S+\s+available: runs the kernels already in the kernel cache, builds none: "
                     r"CXX=no-such-clang\+\+ is set", res.stdout, re.M), res.stdout


@pytest.mark.no_toolchain
def test_allow_unsafe_warning_says_it_loads(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("TILEJIT_CACHE_ALLOW_UNSAFE", "1")
    with pytest.warns(RuntimeWarning) as caught:
        check_dir_safety(root)
    msg = str(caught[0].message)
    assert "Refusing" not in msg
    assert msg == (f"kernel cache directory {root} is world-writable (no sticky bit): other users could plant "
                   "executable code in it. Loading artifacts from it anyway, because TILEJIT_CACHE_ALLOW_UNSAFE=1 "
                   "is set; fix its permissions (chmod go-w, chown) or point TILEJIT_CACHE_DIR elsewhere.")
    os.chmod(root, 0o755)


# ---------------------------------------------------------------------------- a foreign `kernels`
def test_a_foreign_kernels_package_is_named_with_the_fix(tmp_path):
    (tmp_path / "foreign" / "kernels").mkdir(parents=True)
    (tmp_path / "foreign" / "kernels" / "__init__.py").write_text('"""someone else\'s kernels"""\n')
    code = "from compiler.opspec import library_ops\nlibrary_ops()\n"
    env = _env(PYTHONPATH=f"{tmp_path / 'foreign'}{os.pathsep}{REPO}")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"compiler.names.NameClashError: the package 'kernels' at "
                           f"{tmp_path / 'foreign' / 'kernels' / '__init__.py'} is not tilejit's")
    assert "distributions here that install a top-level 'kernels': tilejit" in last
    assert "reinstall tilejit (`pip install --force-reinstall --no-deps tilejit`, or `.` in its checkout)" in last


@pytest.mark.no_toolchain
def test_a_deleted_init_is_named_as_such():
    leftover = types.ModuleType("kernels")
    leftover.__path__ = ["/site-packages/kernels"]       # a namespace package: no __init__.py, no __file__
    msg = names.clash_message("kernels", leftover)
    assert msg.startswith("the package 'kernels' at /site-packages/kernels has no __init__.py: "
                          "tilejit's kernels/__init__.py was deleted")
    assert "reinstall tilejit" in msg


@pytest.mark.no_toolchain
def test_tilejits_packages_carry_the_marker_and_kernels_has_no_version():
    for name in names.PACKAGES:
        names.check(name)            # raises NameClashError when not tilejit's
    import kernels
    assert not hasattr(kernels, "__version__")   # transformers would take it for Hugging Face's `kernels`


# ---------------------------------------------------------------------------- command lines
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_targets_says_gpu_is_compile_only_without_a_device():
    res = _run(["-m", "targets", "-v"])
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("gpu "))
    assert line.split(None, 2)[2] == ("available: compile-only and interpreter, no device: gpu:sm_80 / gpu:sm_90 / "
                                      "gpu:gfx942 compile, gpu:interpret runs, `gpu` launches are refused")
    assert "status        device: none visible to torch" in res.stdout


CLI_MODULES = ["compiler.inspect", "compiler.autotune", "compiler.doctor", "targets"]
SCRIPTS = sorted(str(p.relative_to(REPO)) for d in ("examples", "benchmarks") for p in (REPO / d).glob("*.py")
                 if "__main__" in p.read_text())


@pytest.mark.no_toolchain
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")  # run as __main__ again
@pytest.mark.parametrize("target", CLI_MODULES + SCRIPTS)
def test_help_shows_the_whole_first_paragraph(target, monkeypatch, capsys):
    path = REPO / (target.replace(".", "/") + ".py") if not target.endswith(".py") else REPO / target
    if not path.exists():
        path = REPO / target.replace(".", "/") / "__main__.py"
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    # as `python -m module --help`, in this process (tests/test_newcomer.py runs each script as a file)
    module = target.removesuffix(".py").replace("/", ".")
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert exited.value.code in (0, None), out
    assert " ".join(description(doc).split()) in " ".join(out.split()), out


# ---------------------------------------------------------------------------- the autotuner
RMS = {"rms_norm": [{"rows": 4, "N": 64}]}
SPACE = {"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}]}


@pytest.mark.compile
def _tune_trusted(cache_dir, force=False):
    """(rows, measurements taken) of the last of up to 3 tunes: a busy spell that makes a timing
    untrusted leaves it unstored, and the next tune (forced) measures every candidate again."""
    for _ in range(3):
        n0 = MEASURE_COUNT["n"]
        rows = tune_ops(["rms_norm"], RMS, cache_dir=cache_dir, spaces=SPACE, progress=False, repeat=1, force=force)
        if rows[0]["untrusted_configs"] == 0:
            break
        force = True
    return rows, MEASURE_COUNT["n"] - n0


def test_autotune_kind_reused_and_force(tmp_path):
    rows, _ = _tune_trusted(tmp_path)
    assert rows[0]["kind"] == "measured" and rows[0]["measured"] == 2
    n0 = MEASURE_COUNT["n"]
    rows = tune_ops(["rms_norm"], RMS, cache_dir=tmp_path, spaces=SPACE, progress=False, repeat=1)
    assert rows[0]["kind"] == "reused" and rows[0]["reused"] == 2 and MEASURE_COUNT["n"] == n0
    rows, taken = _tune_trusted(tmp_path, force=True)
    assert rows[0]["kind"] == "measured" and rows[0]["measured"] == 2 and taken == 2
    text = format_summary(rows, "cpu")
    store = DecisionStore(tmp_path)
    assert f"decisions stored in {store.dir}/ (1 file(s)" in text
    assert rows[0]["store"] == str(store.files()[0])


@pytest.mark.parametrize("kernels", ["attention,matmul,rms_norm,serving_attention",
                                     pytest.param("", id="every-op", marks=pytest.mark.slow)])
def test_autotune_kunlun_summary_is_one_table(tmp_path, kernels):
    res = _run(["-m", "compiler.autotune", "--target", "kunlun", "--quick", *(["--kernels", kernels] if kernels else []),
                "--cache-dir", str(tmp_path)])
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert not re.search(r"^\s*rejected ", out, re.M)          # no per-config listing
    ops = re.findall(r"^(\w+) .* estimated ", res.stdout, re.M)
    assert "attention" in ops and len(res.stdout.splitlines()) < len(ops) + 12, res.stdout
    assert f"decisions stored in {tmp_path / 'autotune'}/" in out
    # the log (stderr, not a terminal here) has a line as each shape starts and one as it ends
    done = re.findall(r"^\[\d+/(\d+)\] (\w+) \S+: estimated ", res.stderr, re.M)
    assert len(done) == int(done[0][0]) == len(ops), res.stderr
    res = _run(["-m", "compiler.autotune", "--target", "kunlun", "--quick", "--kernels", "attention",
                "--cache-dir", str(tmp_path)])
    assert re.search(r"^attention .* reused ", res.stdout, re.M), res.stdout + res.stderr


@pytest.mark.no_toolchain
def test_autotune_counts_rejections_and_lists_them_with_verbose(tmp_path, monkeypatch):
    # 84 KB of tiles: more than the plan fits without its fallbacks (which TILEJIT_KUNLUN_SPILL=0 turns off)
    monkeypatch.setenv("TILEJIT_KUNLUN_SPILL", "0")
    shapes = {"attention": [{"batch": 1, "heads": 2, "seq_q": 256, "seq_k": 256, "head_dim": 256, "causal": False}]}
    small, huge = {"BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_DK": 32, "BLOCK_DO": 32}, dict.fromkeys(
        ("BLOCK_M", "BLOCK_N", "BLOCK_DK", "BLOCK_DO"), 256)
    kw = dict(target="kunlun", cache_dir=tmp_path, spaces={"attention": [small, huge]}, progress=False)
    log = io.StringIO()
    text = format_summary(tune_ops(["attention"], shapes, out=log, **kw), "kunlun:xpu3")
    assert "rejected in this run: 1 config(s) (attention: 1 LMBudgetError); `-v` lists each with its reason" in text
    assert log.getvalue() == ""
    rows = tune_ops(["attention"], shapes, out=log, force=True, verbose=True, **kw)
    listed = re.findall(r"^  rejected attention head_dim=256,seq_k=256 (\S+): LMBudgetError: .*no memory plan fits xpu3's", log.getvalue(),
                        re.M)
    assert listed == ["BLOCK_DK=256,BLOCK_DO=256,BLOCK_M=256,BLOCK_N=256"], log.getvalue()
    assert "each is listed above" in format_summary(rows, "kunlun:xpu3", verbose=True)


# ---------------------------------------------------------------------------- the cache command line
def test_clear_export_and_import_count_entries_and_decisions_apart(tmp_path):
    src = tmp_path / "src"
    # a fresh process, so that the kernels it compiles go there too (this one may hold them already)
    res = _run(["-m", "compiler.autotune", "--kernels", "rms_norm", "--quick", "--repeat", "1", "--cache-dir",
                str(src)], TILEJIT_CACHE_DIR=str(src))
    assert res.returncode == 0, res.stderr
    n_entries = sum(1 for _ in KernelCache(src).entry_dirs())
    assert n_entries >= 1 and len(DecisionStore(src).files()) == 1
    archive = tmp_path / "a.tar.gz"
    res = _cache_cli("export", str(archive), "--cache-dir", str(src))
    assert f"exported {n_entries} kernel entries (cpu {n_entries}) and 1 decision file to " in res.stdout, res.stdout
    res = _cache_cli("import", str(archive), "--cache-dir", str(tmp_path / "dst"))
    # into an empty directory: everything is new, nothing "already there"
    assert res.stdout.startswith(f"imported {n_entries} kernel entries (cpu {n_entries}) and 1 decision file into "), \
        res.stdout
    assert "already there" not in res.stdout
    res = _cache_cli("stats", "--json", "--cache-dir", str(tmp_path / "dst"))
    st = json.loads(res.stdout)
    assert st["count"] == n_entries and st["decision_files"] == 1
    res = _cache_cli("clear", "--keep-decisions", "--cache-dir", str(tmp_path / "dst"))
    assert f"cleared {n_entries} kernel entries from" in res.stdout and "(kept 1 decision files" in res.stdout
    assert len(DecisionStore(tmp_path / "dst").files()) == 1
    res = _cache_cli("clear", "--cache-dir", str(tmp_path / "dst"))
    assert res.stdout.startswith("cleared 0 kernel entries and 1 decision files from"), res.stdout
    assert DecisionStore(tmp_path / "dst").files() == []
