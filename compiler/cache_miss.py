"""What a launch says when its kernel is not in the kernel cache and cannot be built here: under
TILEJIT_CACHE_STRICT=1 (`CacheMissError`), or where the target's toolchain is missing, a slim
deployment image (`ToolchainMissingError`). The message names the kernel, the target, the
numerics policy and the specialisation (dtypes, constexprs, integer hints), says which versions
of that kernel the cache does hold, and how to pre-build it on a machine that can build.
"""
from __future__ import annotations

import json

from .cache import KernelCache
from .cache.safety import CacheMissError
from .errors import ToolchainMissingError

__all__ = ["specialisation", "strict_miss", "no_toolchain"]


def specialisation(fn_ir) -> str:
    """`add_kernel(x_ptr: *fp32, n: int32 (multiple of 16), BLOCK=77)`: the run-time parameters'
    types and hints, and the values the others were specialised to."""
    runtime = {p.name: p for p in fn_ir.params}
    parts = []
    for name, value in fn_ir.specialization.get("args", ()):
        p = runtime.get(name)
        if p is None:
            parts.append(f"{name}={value}")
            continue
        hint = " (multiple of 16)" if p.hints.get("divisible_by") == 16 else ""
        parts.append(f"{name}: {value}{hint}")
    opts = fn_ir.specialization.get("options")
    if opts:
        parts += [f"{k}={v}" for k, v in sorted(opts.items())]
    return f"{fn_ir.name}({', '.join(parts)})"


def _held(cache: KernelCache, kernel: str, target, compiler: str) -> list[str]:
    """What the cache holds of `kernel` for this target instead: other specialisations, or builds
    for another machine (the fingerprint fields that differ) or by another tilejit."""
    here = json.loads(json.dumps(target.fingerprint(), default=str))
    base = target.name.split(":")[0]
    found: dict[str, int] = {}
    for _key, meta in cache.manifests():
        if meta.get("kernel") != kernel or str(meta.get("target", "")).split(":")[0] != base:
            continue
        fp = meta.get("fingerprint")
        diff = sorted(k for k in set(fp) | set(here) if fp.get(k) != here.get(k)) if isinstance(fp, dict) else ["?"]
        what = meta.get("specialization") or "a specialisation built before they were recorded"
        line = f"{what} for {meta.get('target')}, policy {meta.get('policy', '?')}" + (
            f", built for another machine or toolchain (fingerprint fields {', '.join(diff)} differ)" if diff else "")
        if meta.get("compiler") not in (None, compiler):
            line += ", built by another version of tilejit (its compiler's sources differ)"
        found[line] = found.get(line, 0) + 1
    return [f"{line}" + (f" ({n} entries)" if n > 1 else "") for line, n in sorted(found.items())]


def _prebuild(kernel: str, target, op: str | None) -> str:
    """How to get this kernel into the cache here, from a machine that can build it."""
    base = target.name.split(":")[0]
    arch = f" --arch {target.name.split(':', 1)[1]}" if ":" in target.name else ""
    lines = [f"To pre-build it, on a machine that can build for {target.name} with a matching target fingerprint "
             "(the same tilejit; for cpu the same ISA, or the same TILEJIT_CPU_ARCH on both): run this program there "
             "once with "
             "TILEJIT_CACHE_RECORD=used-keys.txt (or only compile: `with compiler.compile_only(): ...`, or "
             f"`{kernel}.warmup(...)`), then `python -m compiler.cache export tilejit-cache.tar.gz --keys "
             "used-keys.txt` there and `python -m compiler.cache import tilejit-cache.tar.gz` here."]
    if op is not None and _is_library_op(op):
        lines.append(f"It is a kernel of the library op {op!r}: `python -m compiler.autotune --target {base}{arch} "
                     f"--kernels {op}` builds (and tunes) its kernels on the op's serving shapes.")
    return "\n".join(lines)


def _is_library_op(op: str) -> bool:
    from .opspec import library_ops  # noqa: PLC0415 - loads the op libraries, only for this message
    try:
        return op in library_ops()
    except Exception:  # noqa: BLE001 - a broken op library must not hide the miss
        return False


def _head(fn_ir, target, policy: str, op: str | None) -> str:
    of = f" (library op {op!r})" if op else ""
    return (f"kernel '{fn_ir.name}'{of} for target {target.name}, policy {policy}, specialised as "
            f"{specialisation(fn_ir)}")


def _tail(cache: KernelCache, fn_ir, target, op: str | None, compiler: str) -> str:
    held = _held(cache, fn_ir.name, target, compiler)
    where = ("\nThe cache holds it only as:\n" + "\n".join(f"  - {h}" for h in held[:8])
             + (f"\n  - ... and {len(held) - 8} more" if len(held) > 8 else "")) if held else \
        f"\nThe cache holds no build of '{fn_ir.name}' for {target.name}."
    return f"{where}\n{_prebuild(fn_ir.name, target, op)}"


def strict_miss(cache: KernelCache, key: str, fn_ir, target, policy: str, op: str | None,
                compiler: str) -> CacheMissError:
    """`compiler`: the hash of the compiler's sources entries record (jit.py), to tell another
    tilejit's builds apart."""
    return CacheMissError(
        f"TILEJIT_CACHE_STRICT=1: {_head(fn_ir, target, policy, op)} is not in the kernel cache {cache.root} "
        f"(key {key[:16]}), and strict mode forbids compiling.{_tail(cache, fn_ir, target, op, compiler)}")


def no_toolchain(cache: KernelCache, key: str, fn_ir, target, policy: str, op: str | None, compiler: str,
                 why: str) -> ToolchainMissingError:
    return ToolchainMissingError(
        f"{_head(fn_ir, target, policy, op)} is not in the kernel cache {cache.root} (key {key[:16]}), and this "
        f"machine cannot build it: {why}. Kernels already in the cache run without a compiler."
        f"{_tail(cache, fn_ir, target, op, compiler)}")
