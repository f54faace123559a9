"""`python -m compiler.doctor` says what works on this machine and what does not: Python and the
installation, name clashes with other distributions, the C++ compiler, the default target (a test
kernel is compiled and run), torch's build, triton against the tested range, devices, the
Kunlun SDK and the kernel cache directory.

Exit status 0 when the default target (cpu) works here, 1 when something it needs is broken (the
lines marked FAIL say what and how to fix it); WARN lines name what works only in part.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata as metadata
import json
import os
import pathlib
import re
import stat
import sys
import tempfile

from . import language as tl
from . import names
from .clihelp import description
from .jit import kernel

OK, INFO, WARN, FAIL = "ok", "info", "WARN", "FAIL"
_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _row(status: str, what: str, detail: str) -> dict:
    return {"status": status, "what": what, "detail": detail}


# ---------------------------------------------------------------------------- the installation
def check_python() -> list[dict]:
    venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    where = f"virtual environment {sys.prefix}" if venv else "not in a virtual environment"
    ok = sys.version_info >= (3, 10)
    return [_row(OK if ok else FAIL, "python", f"{sys.version.split()[0]} at {sys.executable} ({where})"
                 + ("" if ok else "; tilejit needs Python >= 3.10"))]


def check_install() -> list[dict]:
    """Which tilejit distribution is installed, and whether the packages imported are the ones it installed."""
    try:
        dist = metadata.distribution(names.DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return [_row(INFO, "tilejit", f"not installed as a distribution: packages imported from {_ROOT} (a checkout "
                     "on sys.path); `pip install -e .` there installs it")]
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        url = {}
    if url.get("dir_info", {}).get("editable"):
        src = pathlib.Path(url.get("url", "").removeprefix("file://")).resolve()
        if src != _ROOT:
            return [_row(WARN, "tilejit", f"{dist.version}, an editable install of {src}, but the packages imported "
                         f"here come from {_ROOT} (the current directory comes first on sys.path)")]
        return [_row(OK, "tilejit", f"{dist.version}, an editable install of {src}")]
    installed = pathlib.Path(str(dist.locate_file("compiler"))).resolve().parent
    if installed != _ROOT:
        return [_row(INFO, "tilejit", f"{dist.version}, installed in {installed}; the packages imported here come "
                     f"from {_ROOT} (the current directory comes first on sys.path)")]
    return [_row(OK, "tilejit", f"{dist.version}, installed in {installed}")]


def check_packages() -> list[dict]:
    """Each of tilejit's top-level packages: imported from where, really tilejit's, shared with another distribution?"""
    rows = []
    for name in names.PACKAGES:
        found = names.find(name)      # read, not imported: a foreign package is never executed here
        if found is None or not names.is_tilejit(found):
            rows.append(_row(FAIL, f"package {name}", names.clash_message(name, found) if found is not None
                             else "not found on sys.path: reinstall tilejit"))
            continue
        try:
            module = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - report, do not stop
            rows.append(_row(FAIL, f"package {name}", f"does not import: {type(e).__name__}: {e}"))
            continue
        others = [p for p in names.providers(name) if p.split()[0].lower() != names.DISTRIBUTION]
        if others:
            rows.append(_row(WARN, f"package {name}", f"tilejit's is imported, but {', '.join(others)} installs a "
                             f"top-level '{name}' too: installing or uninstalling it overwrites or deletes "
                             f"tilejit's files; keep it in another virtual environment"))
        elif name == "kernels" and hasattr(module, "__version__"):
            rows.append(_row(WARN, "package kernels", "has a __version__: transformers would take it for Hugging "
                             "Face's `kernels` package"))
        else:
            rows.append(_row(OK, f"package {name}", f"tilejit's ({os.path.dirname(module.__file__)})"))
    return rows


# ---------------------------------------------------------------------------- the default target
def check_cpu() -> list[dict]:
    """The C++ compiler (through the cpu plugin's requirement) and a test kernel compiled and run."""
    from .target import load_plugin, requirements  # noqa: PLC0415
    try:
        plugin = load_plugin("cpu")
        ok, why = requirements.availability("cpu", plugin)
        report = requirements.requirement_report(plugin)
    except Exception as e:  # noqa: BLE001
        return [_row(FAIL, "cpu target", f"{type(e).__name__}: {e}")]
    rows = [_row(OK if sat else FAIL, r.what, f"{found or 'none found'} (needs >= {r.minimum})"
                 + ("" if sat else f"; {r.hint}")) for r, sat, found in report]
    if not ok:
        return rows + [_row(FAIL, "cpu target", why)]
    cannot = requirements.build_problem("cpu", plugin)
    if cannot:
        return rows + [_row(FAIL, "cpu target", f"{cannot}; only kernels already in the kernel cache run here "
                                                "(an imported cache: docs/deployment.md)")]
    return rows + [_run_test_kernel()]


@kernel
def doctor_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@contextlib.contextmanager
def _private_cache():
    """A fresh cache directory for the test kernel: the check compiles for real and leaves the
    user's cache as it was."""
    old = os.environ.get("TILEJIT_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tilejit-doctor-") as d:
        os.environ["TILEJIT_CACHE_DIR"] = d
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("TILEJIT_CACHE_DIR", None)
            else:
                os.environ["TILEJIT_CACHE_DIR"] = old


def _run_test_kernel() -> dict:
    import torch  # noqa: PLC0415

    from .target import use_target  # noqa: PLC0415
    x, y = torch.arange(100, dtype=torch.float32), torch.full((100,), 0.5)
    out = torch.empty_like(x)
    try:
        with _private_cache(), use_target("cpu"):
            doctor_add[(2,)](x, y, out, 100, BLOCK=64)
    except Exception as e:  # noqa: BLE001 - the point is to report it
        return _row(FAIL, "cpu target", f"a test kernel failed: {type(e).__name__}: {str(e)[:600]}")
    if not torch.equal(out, x + y):
        return _row(FAIL, "cpu target", "a test kernel ran but computed a wrong result")
    return _row(OK, "cpu target", "a test kernel compiled (C++ with OpenMP), loaded and computed the right result")


# ---------------------------------------------------------------------------- torch, triton, devices
def check_torch() -> list[dict]:
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        return [_row(FAIL, "torch", f"does not import ({type(e).__name__}: {e}); install torch's CPU build: see "
                     "the README, Install")]
    hip = getattr(torch.version, "hip", None)
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else f"ROCm {hip} build" if hip else "CPU build"
    rows = [_row(OK, "torch", f"{torch.__version__}, {build}")]
    try:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        n = 0
    if n:
        devs = ", ".join(torch.cuda.get_device_name(i) for i in range(n))
        rows.append(_row(OK, "gpu devices", f"{n}: {devs}"))
    else:
        rows.append(_row(INFO, "gpu devices", "none visible to torch"))
    return rows


def tested_range(dist_name: str) -> str | None:
    """The version specifier tilejit requires of `dist_name`: from the checkout's pyproject.toml
    when there is one (the source of truth), else from the installed metadata."""
    reqs: list[str] = []
    pyproject = _ROOT / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        m = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
        reqs = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    else:
        try:
            reqs = metadata.requires(names.DISTRIBUTION) or []
        except metadata.PackageNotFoundError:
            reqs = []
    for r in reqs:
        m = re.match(rf"\s*{re.escape(dist_name)}\s*([<>=!~][^;]*)", r, re.I)
        if m:
            return m.group(1).strip()
    return None


def satisfies(version: str, spec: str) -> bool:
    """`version` within `spec` (clauses such as ">=3.9,<3.10", "==3.9.*"), by release numbers."""
    from .target.requirements import parse_version  # noqa: PLC0415
    v = parse_version(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, ref = re.match(r"(~=|==|!=|<=|>=|<|>)\s*(.+)", clause).groups()
        if ref.endswith(".*"):
            prefix = parse_version(ref[:-2])[:len(ref[:-2].split("."))]
            same = v[:len(prefix)] == prefix
            if (op == "==") != same:
                return False
            continue
        r = parse_version(ref)
        ok = {"==": v == r, "!=": v != r, "<=": v <= r, ">=": v >= r, "<": v < r, ">": v > r, "~=": v >= r}[op]
        if not ok:
            return False
    return True


def check_triton() -> list[dict]:
    spec = tested_range("triton") or ""
    try:
        version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        return [_row(WARN, "triton", f"not installed: the gpu target is unavailable (pip install 'triton{spec}')")]
    if spec and not satisfies(version, spec):
        return [_row(WARN, "triton", f"{version} is outside the tested range {spec}: gpu-target results may differ "
                     f"(pip install 'triton{spec}')")]
    return [_row(OK, "triton", f"{version} (tested range {spec or 'none declared'})")]


def check_targets() -> list[dict]:
    """Every registered target: usable here, in part, or not, and what its plugin found (e.g. the Kunlun SDK)."""
    from .target import load_plugin, requirements, target_names  # noqa: PLC0415
    rows = []
    for name in target_names():
        if name == "cpu":
            continue   # checked above, with a test kernel
        try:
            plugin = load_plugin(name)
            ok, why = requirements.availability(name, plugin)
            limited = requirements.limited(name, plugin) if ok else ""
            status = list(plugin.status())
        except Exception as e:  # noqa: BLE001
            rows.append(_row(WARN, f"{name} target", f"{type(e).__name__}: {e}"))
            continue
        state = ("available" + (f": {limited}" if limited else "")) if ok else f"not available: {why}"
        rows.append(_row(OK if ok and not limited else INFO if ok else WARN, f"{name} target", state))
        rows += [_row(INFO, f"{name} target", line) for line in status]
    return rows


# ---------------------------------------------------------------------------- the cache directory
def check_cache_dir() -> list[dict]:
    from .cache.safety import CacheError, check_dir_safety  # noqa: PLC0415
    from .cache.store import default_cache_dir  # noqa: PLC0415
    root = default_cache_dir()
    src = "TILEJIT_CACHE_DIR" if os.environ.get("TILEJIT_CACHE_DIR") else "default"
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent   # the directory it will be created in
    if not os.access(probe, os.W_OK):
        return [_row(WARN, "cache dir", f"{root} ({src}): not writable: it serves lookups, every compile is "
                     "lost at exit; point TILEJIT_CACHE_DIR at a writable directory")]
    try:
        with _warnings_as_text() as seen:
            check_dir_safety(root, root.parent if not root.exists() else root)
    except CacheError as e:
        return [_row(FAIL, "cache dir", f"{root} ({src}): {e}")]
    mode = stat.filemode(os.stat(root).st_mode) if root.exists() else "created at the first compile"
    if seen:
        return [_row(WARN, "cache dir", f"{root} ({src}, {mode}): {seen[0]}")]
    return [_row(OK, "cache dir", f"{root} ({src}, {mode}): writable, only you can write to it")]


@contextlib.contextmanager
def _warnings_as_text():
    import warnings  # noqa: PLC0415
    seen: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield seen
    seen += [str(w.message) for w in caught]


# ---------------------------------------------------------------------------- the report
CHECKS = (check_python, check_install, check_packages, check_cpu, check_torch, check_triton, check_targets,
          check_cache_dir)


def run_checks() -> list[dict]:
    rows = []
    for check in CHECKS:
        try:
            rows += check()
        except Exception as e:  # noqa: BLE001 - one broken check must not hide the others
            rows.append(_row(FAIL, check.__name__.removeprefix("check_"), f"the check itself failed: "
                             f"{type(e).__name__}: {e}"))
    return rows


def format_report(rows: list[dict]) -> str:
    width = max(len(r["what"]) for r in rows)
    lines = ["tilejit doctor: what works on this machine and what does not", ""]
    lines += [f"  {r['status']:<5} {r['what']:<{width}}  {r['detail']}" for r in rows]
    bad = [r for r in rows if r["status"] == FAIL]
    lines.append("")
    lines.append("the default target (cpu) does not work here: see the FAIL lines" if bad else
                 "the default target (cpu) works here" + ("; WARN lines: what works only in part"
                                                           if any(r["status"] == WARN for r in rows) else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.doctor", description=description(__doc__))
    ap.add_argument("--json", action="store_true", help="the checks as JSON (status, what, detail)")
    args = ap.parse_args(argv)
    rows = run_checks()
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(format_report(rows))
    return 1 if any(r["status"] == FAIL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
