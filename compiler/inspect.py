"""`python -m compiler.inspect MODULE:KERNEL ...` (or `path/to/file.py:KERNEL`) prints a kernel's
IR before and after the passes and the source a target generates for one specialisation.

Example:
    python -m compiler.inspect examples/example_kernels.py:add_kernel \\
        --signature '*fp32,*fp32,*fp32,i32' --constexpr BLOCK=1024 --target cpu
The signature lists the run-time parameters in order, with the types a launch passes: a tensor is
`*` and its element type (`*fp32`, `*fp16`, `*bf16`, `*i32`, `*i64`, `*i1`, `*i8`, `*i16`), an int
`i32` (or `i64` when it does not fit), a float `fp32`, a bool `i1`; constexprs are given by name. A
run-time parameter given with --constexpr is specialised to that value (e.g. `-c stride=1`, as a
launch does for ints equal to 1); run-time parameters with a default may be left off the end of
the signature, and are then specialised to their defaults.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys

from . import dtypes as D
from .errors import TilejitError
from .frontend import ArgSpec, constexpr_params
from .jit import KernelFunction
from .loader import LoadError, load_ref
from .target import get_target

_ALIASES = {"i32": "int32", "i64": "int64", "i1": "int1", "f32": "fp32", "f16": "fp16", "i8": "int8",
            "i16": "int16", "bool": "int1"}


# what a launch passes for a scalar argument: int (int32 / int64), float (fp32), bool (int1)
_SCALARS = (D.int32, D.int64, D.float32, D.int1)
_SHORT = {"int32": "i32", "int64": "i64", "int1": "i1", "int8": "i8", "int16": "i16"}


class InspectError(TilejitError):
    """A command-line argument of `python -m compiler.inspect` that cannot be used."""


def valid_types() -> str:
    tensors = [f"*{_SHORT.get(d.name, d.name)}" for d in D.DTYPE_TO_TORCH]
    return ", ".join(tensors) + " (tensors); " + ", ".join(_SHORT.get(d.name, d.name) for d in _SCALARS) + " (scalars)"


def parse_type(text: str) -> D.dtype:
    text = text.strip()
    ptr = text.startswith("*")
    base = _ALIASES.get(text.lstrip("*"), text.lstrip("*"))
    try:
        dt = D.from_name(base)
    except ValueError:
        dt = None
    if dt is None or dt not in D.DTYPE_TO_TORCH or (not ptr and dt not in _SCALARS):
        raise InspectError(f"--signature: {text!r} is not a kernel argument type; valid types are {valid_types()}")
    return D.pointer_type(dt) if ptr else dt


def parse_constexpr(text: str):
    name, _, value = text.partition("=")
    value = value.strip()
    if value.startswith("tl."):
        return name.strip(), D.from_name(_ALIASES.get(value[3:], {"float32": "fp32", "float16": "fp16",
                                                                   "bfloat16": "bf16"}.get(value[3:], value[3:])))
    try:
        return name.strip(), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name.strip(), value


def _package_module(path: str) -> tuple[str, str] | None:
    """(the directory above its top package, the dotted module name) of a file that lies in a
    package (its directory has an __init__.py), else None."""
    parts, d = [os.path.splitext(os.path.basename(path))[0]], os.path.dirname(path)
    while os.path.isfile(os.path.join(d, "__init__.py")):
        parts.insert(0, os.path.basename(d))
        d = os.path.dirname(d)
    return (d, ".".join(parts)) if len(parts) > 1 else None


def _load_file(path: str, attr: str, ref: str):
    """`attr` of the Python file at `path` (not in a package), imported as `python path` would run
    it (its directory first on sys.path, so it can import its neighbours)."""
    sys.path.insert(0, os.path.dirname(path))
    name = "_tilejit_inspect_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any failure of the user's file is reported with its name
        raise InspectError(f"{ref}: importing {path} failed: {type(e).__name__}: {e}") from None
    if not hasattr(module, attr):
        raise InspectError(f"{ref}: {path} defines no {attr!r}")
    return getattr(module, attr)


def load_kernel(ref: str) -> KernelFunction:
    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise InspectError(f"expected MODULE:KERNEL or path/to/file.py:KERNEL, got {ref!r}")
    module = where
    if where.endswith(".py") or os.sep in where or "/" in where:
        if not os.path.isfile(where):
            raise InspectError(f"{ref}: no such file {where!r}")
        path = os.path.abspath(where)
        package = _package_module(path)   # imported as its module, so that its relative imports work
        if package is None:
            return _checked_kernel(_load_file(path, attr, ref), ref)
        root, module = package
        if root not in sys.path:
            sys.path.insert(0, root)
    try:
        obj = load_ref(f"{module}:{attr}", "kernel")
    except LoadError as e:
        raise InspectError(str(e)) from None
    return _checked_kernel(obj, ref)


def _checked_kernel(obj, ref: str) -> KernelFunction:
    if not isinstance(obj, KernelFunction):
        raise InspectError(f"{ref} is not a @kernel function")
    return obj


def specs_for(kfn: KernelFunction, signature: list[D.dtype], constexprs: dict) -> list[ArgSpec]:
    # a run-time parameter given with --constexpr is specialised to that value (as an int equal to
    # 1 is at a launch)
    cnames = constexpr_params(kfn.fn, kfn) | set(constexprs)
    runtime_names = [n for n in kfn.arg_names if n not in cnames]
    params = kfn.signature.parameters
    left_off = runtime_names[len(signature):]
    if left_off and all(params[n].default is not params[n].empty for n in left_off):
        # run-time parameters with defaults, left off the end: specialised to their defaults
        constexprs.update({n: params[n].default for n in left_off})
        cnames |= set(left_off)
        runtime_names = runtime_names[:len(signature)]
    if len(signature) != len(runtime_names):
        raise InspectError(f"kernel '{kfn.__name__}' has {len(runtime_names)} run-time parameters "
                           f"({', '.join(runtime_names)}); the signature gives {len(signature)} (only those "
                           f"with a default may be left off the end)")
    specs, it = [], iter(signature)
    for n in kfn.arg_names:
        if n in cnames:
            if n not in constexprs:
                default = kfn.signature.parameters[n].default
                if default is kfn.signature.parameters[n].empty:
                    raise InspectError(f"constexpr '{n}' needs a value: --constexpr {n}=...")
                constexprs[n] = default
            specs.append(ArgSpec(n, "constexpr", value=constexprs[n]))
        else:
            dt = next(it)
            specs.append(ArgSpec(n, "tensor" if dt.is_ptr() else "scalar", dtype=dt))
    return specs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.inspect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="MODULE:KERNEL (e.g. examples.example_kernels:add_kernel) or "
                                   "path/to/file.py:KERNEL")
    ap.add_argument("--signature", "-s", default="", help="run-time parameter types, comma-separated: "
                                                          + valid_types())
    ap.add_argument("--constexpr", "-c", action="append", default=[], help="NAME=VALUE (repeatable)")
    ap.add_argument("--target", "-t", default="cpu")
    ap.add_argument("--numerics", default="fast", choices=("fast", "strict"))
    ap.add_argument("--stage", default="all", choices=("ir", "ir-opt", "source", "all"))
    args = ap.parse_args(argv)
    try:
        kfn = load_kernel(args.kernel)
        sig = [parse_type(t) for t in args.signature.split(",") if t.strip()]
        consts = dict(parse_constexpr(c) for c in args.constexpr)
        target = get_target(args.target)
        before, fn_ir, source = kfn.lower(specs_for(kfn, sig, consts), target, args.numerics)
    except TilejitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from .ir import print_function  # noqa: PLC0415
    sections = {"ir": ("IR (frontend)", before), "ir-opt": ("IR (after passes)", print_function(fn_ir)),
                "source": (f"{target.name} source", source)}
    for key in (("ir", "ir-opt", "source") if args.stage == "all" else (args.stage,)):
        title, text = sections[key]
        print(f"// ===== {title} =====")
        print(text)
    for name, value in target.inspect_extras(fn_ir).items():
        print(f"// ===== {name} =====\n{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
