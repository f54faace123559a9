"""Values of C constants (enumerators, sizeof) read from installed headers by a tiny C++ shim.

The Kunlun runtime and BKCL enum values (XPU_HOST_TO_DEVICE, BKCL_FLOAT, ...) are not documented,
so they are never written into Python: at first use a program that prints each requested
expression is compiled with the host compiler against the SDK's include dir and run once; its
output is cached as JSON under the tilejit cache dir, keyed by the shim text, the compiler and
the name, size and mtime of every header under the include dirs' xpu/ trees. A name the header lacks is
reported as absent (None) when optional, and as an error naming the header when required.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile

from compiler.errors import TargetError
from targets.cpu import toolchain as cpu_toolchain

_LINE = re.compile(r"^TJ (\S+) (-?\d+)$")


class ProbeError(TargetError):
    """The shim could not be built or run against the installed headers."""


def shim_source(includes: list[str], exprs: dict[str, str]) -> str:
    """C++ text printing `TJ <label> <value>` for each label -> C expression."""
    lines = ["// reads constants from the installed headers (tilejit, kunlun target)", "#include <cstdio>"]
    lines += [f"#include <{h}>" for h in includes]
    lines.append("int main() {")
    for label, expr in exprs.items():
        lines.append(f'  std::printf("TJ %s %lld\\n", "{label}", (long long)({expr}));')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def parse_output(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def _headers_state(include_dirs: list[str]) -> list:
    state = []
    for inc in include_dirs:
        # an SDK include dir may hold a whole toolchain's headers: the xpu/ tree is what is probed
        top = os.path.join(inc, "xpu") if os.path.isdir(os.path.join(inc, "xpu")) else inc
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(root, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                state.append([os.path.relpath(p, inc), st.st_size, st.st_mtime_ns])
    return state


def _cache_dir():
    from compiler.cache import default_cache_dir  # noqa: PLC0415 - only needed on a probe
    return default_cache_dir() / "kunlun-sdk"


def _compile(cxx: str, src: str, include_dirs: list[str], out: str | None, workdir: str):
    path = os.path.join(workdir, "probe.cpp")
    with open(path, "w") as f:
        f.write(src)
    cmd = [cxx, "-std=c++17", *(f"-I{d}" for d in include_dirs), path]
    cmd += ["-o", out] if out else ["-fsyntax-only"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def probe(includes: list[str], include_dirs: list[str], exprs: dict[str, str],
          required: set[str] = frozenset()) -> dict[str, int | None]:
    """{label: value or None when the header does not define it}; cached on disk."""
    cxx = cpu_toolchain.find_compiler()
    if cxx is None:
        raise ProbeError("reading SDK constants needs a host C++ compiler (install g++ or set CXX)")
    state = [shim_source(includes, exprs), cxx, cpu_toolchain._version(cxx), include_dirs,
             _headers_state(include_dirs), sorted(required)]
    key = hashlib.sha256(json.dumps(state).encode()).hexdigest()[:32]
    cache = _cache_dir() / f"{key}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    found = _build_and_run(cxx, includes, include_dirs, exprs, required)
    values = {k: found.get(k) for k in exprs}
    _write_atomic(cache, json.dumps(values, indent=1, sort_keys=True))
    return values


def _build_and_run(cxx: str, includes, include_dirs, exprs, required) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="tilejit-sdk-probe-") as tmp:
        exe = os.path.join(tmp, "probe")
        res = _compile(cxx, shim_source(includes, exprs), include_dirs, exe, tmp)
        if res.returncode != 0:
            # which names does the installed header lack? one syntax check per expression
            present = {k: e for k, e in exprs.items()
                       if not _compile(cxx, shim_source(includes, {k: e}), include_dirs, None, tmp).returncode}
            lacking = sorted(set(required) - set(present))
            if lacking:
                raise ProbeError(f"the installed headers ({', '.join(includes)} in {', '.join(include_dirs)}) "
                                 f"do not define {', '.join(lacking)}; compiler said:\n{res.stderr[-3000:]}")
            res = _compile(cxx, shim_source(includes, present), include_dirs, exe, tmp)
            if res.returncode != 0:
                raise ProbeError(f"the enum shim does not build against {', '.join(include_dirs)}:\n"
                                 f"{res.stderr[-3000:]}")
        run = subprocess.run([exe], capture_output=True, text=True, check=False, timeout=60)
        if run.returncode != 0:
            raise ProbeError(f"the enum shim exited with {run.returncode}: {run.stderr[-2000:]}")
        return parse_output(run.stdout)


def _write_atomic(path, text: str) -> None:
    # concurrent first uses from several ranks: each writes its own temp file, the rename wins
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        # a read-only cache only costs a rebuild next time
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
