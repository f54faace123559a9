"""Third-party Triton code for the compatibility suite, fetched at test time (never stored in the
repository): `pip download --no-deps` of a pinned wheel into the session's temporary directory,
unpacked there, its modules imported with tilejit's front door served as `triton`
(compiler.triton.alias), unchanged."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pathlib
import subprocess
import sys
import types
import warnings
import zipfile

import pytest

from compiler.triton import alias

LIGER = "liger-kernel==0.8.5"
FLAGGEMS = "flag_gems==5.0.2"
VLLM_KUNLUN = "vllm-kunlun==0.11.1"   # Kunlunxin's vLLM plugin: the Triton kernels it runs on the P800
EINOPS = "einops==0.8.2"              # a pure-Python dependency of one of its modules
GEAK = "geak-eval==0.1.5"      # TritonBench-G kernels (Triton tutorials among them), Apache-2.0
TRITONBENCH_DIR = "geak_eval/data/TritonBench/data/TritonBench_G_v1"


def fetch_wheel(spec: str, root: pathlib.Path) -> pathlib.Path:
    """The unpacked wheel of `spec` under `root`; skips (with the reason, also as a warning so it is
    printed) when it cannot be downloaded here."""
    dest = root / spec.replace("==", "-")
    if (dest / ".unpacked").exists():
        return dest
    dl = root / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                              "-q", "-d", str(dl), spec], capture_output=True, text=True, timeout=180)
        why = (out.stderr.strip().splitlines() or ["pip failed"])[-1] if out.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        why = f"{type(e).__name__}: {e}"
    name = spec.split("==")[0].replace("-", "_")
    wheels = sorted(dl.glob(f"{name}-*.whl"))
    if why or not wheels:
        msg = f"compatibility suite: cannot download {spec} ({why or 'no wheel'}); its cases are skipped"
        warnings.warn(msg, stacklevel=2)
        pytest.skip(msg)
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(dest)
    (dest / ".unpacked").touch()
    return dest


def import_liger(root: pathlib.Path, modules: list[str]) -> dict[str, types.ModuleType]:
    """Liger-Kernel's op modules, imported without running the package's own __init__ files (they
    import every op and optional integrations): the two packages are registered as plain
    namespaces over the unpacked directories, then each op module is imported as it is."""
    for pkg in ("liger_kernel", "liger_kernel.ops"):
        if pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = [str(root.joinpath(*pkg.split(".")))]
            sys.modules[pkg] = m
    with alias():
        return {m: importlib.import_module(f"liger_kernel.ops.{m}") for m in modules}


def import_tritonbench(root: pathlib.Path, stem: str) -> types.ModuleType:
    """One TritonBench-G file's kernels and host functions: the file's text above its first
    `#####` line (below it is a GPU test that runs at import), executed as a module whose
    __file__ is the unpacked file, so kernel sources are read from it."""
    path = root / TRITONBENCH_DIR / f"{stem}.py"
    lines = path.read_text().splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if line.startswith("#####")), len(lines))
    name = f"tritonbench_{stem}"
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    with alias():
        exec(compile("".join(lines[:cut]), str(path), "exec"), mod.__dict__)  # noqa: S102 - the downloaded file
    return mod


def import_flaggems(root: pathlib.Path, module: str) -> types.ModuleType:
    """One of FlagGems' op modules (`ops.softmax`), imported as written. Its package's own
    __init__ files detect a GPU vendor at import, so they are stood in for by small modules: the
    runtime's heuristics are FlagGems' NVIDIA table (its file imported as written), `libentry`
    (a launch cache) and the device context are pass-throughs, and the backend shims keep
    FlagGems' portable implementations."""
    base = root / "flag_gems"

    def package(name: str, path: pathlib.Path | None = None, **attrs) -> types.ModuleType:
        m = sys.modules.get(name)
        if m is None:
            m = sys.modules[name] = types.ModuleType(name)
            if path is not None:
                m.__path__ = [str(path)]
        m.__dict__.update(attrs)
        return m

    with alias():
        import triton   # the alias: tilejit's front door
        spec = importlib.util.spec_from_file_location(
            "flag_gems_nvidia_heuristics", base / "runtime/backend/_nvidia/heuristics_config_utils.py")
        heur = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(heur)
        package("flag_gems", base)
        package("flag_gems.ops", base / "ops")
        package("flag_gems.ops.zeros", zero_=lambda t: t.zero_())
        package("flag_gems.runtime", base / "runtime",
                get_heuristic_config=lambda name: heur.HEURISTICS_CONFIGS[name],
                get_tuned_config=lambda name: [triton.Config({})],
                torch_device_fn=types.SimpleNamespace(device=lambda d: contextlib.nullcontext()))
        package("flag_gems.utils", base / "utils", libentry=lambda *a, **k: (lambda f: f))
        package("flag_gems.utils.triton_lang_helper", use_tl_extra=lambda f: f)
        return importlib.import_module(f"flag_gems.{module}")


def import_vllm_kunlun(root: pathlib.Path, modules: list[str]) -> dict[str, types.ModuleType]:
    """vllm-kunlun's op modules (`fla.cumsum`, `mamba.causal_conv1d`, ...), imported as written.
    vLLM itself and the chip's native op libraries (`kunlun_ops`, `cocopod`) are not installed: their
    names are stood in for by empty modules, and `vllm.triton_utils` serves tilejit's front door as
    `triton` (as vLLM's serves Triton); the Triton kernels and their launch code are the wheel's."""
    with alias():
        import triton
        import triton.language as tl
        stand_ins = {"vllm": None, "vllm.attention": None, "vllm.attention.backends": None,
                     "vllm.attention.backends.utils": {"PAD_SLOT_ID": -1},
                     "vllm.triton_utils": {"tl": tl, "triton": triton, "tldevice": tl.math},
                     "kunlun_ops": {}, "cocopod": {}}
        for name, attrs in stand_ins.items():
            m = sys.modules.setdefault(name, types.ModuleType(name))
            if attrs is None:
                m.__path__ = []
            else:
                m.__dict__.update(attrs)
        for pkg in ("vllm_kunlun", "vllm_kunlun.ops", "vllm_kunlun.ops.fla", "vllm_kunlun.ops.mamba"):
            if pkg not in sys.modules:
                m = types.ModuleType(pkg)
                m.__path__ = [str(root.joinpath(*pkg.split(".")))]
                sys.modules[pkg] = m
        return {m: importlib.import_module(f"vllm_kunlun.ops.{m}") for m in modules}


def functions_of(path: pathlib.Path, names: list[str], tmp: pathlib.Path) -> types.ModuleType:
    """The top-level functions `names` of a source file whose module cannot be imported here (a
    model or attention backend that imports the whole serving stack): their text, decorators
    included, unchanged, in a module of their own under `tmp` that imports torch and the front
    door as `triton` (so the frontend reads the kernels from it)."""
    import ast
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    parts = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            parts.append("".join(lines[start:node.end_lineno]))
    out = tmp / f"{path.stem}_functions.py"
    out.write_text("import torch\nimport triton\nimport triton.language as tl\n\n\n" + "\n\n".join(parts))
    spec = importlib.util.spec_from_file_location(out.stem, out)
    mod = importlib.util.module_from_spec(spec)
    with alias():
        spec.loader.exec_module(mod)
    return mod
