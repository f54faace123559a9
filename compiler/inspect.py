"""`python -m compiler.inspect MODULE:KERNEL ...`: prints a kernel's IR before and after the
passes and the source a target generates for one specialisation.

Example:
    python -m compiler.inspect examples.example_kernels:add_kernel \\
        --signature '*fp32,*fp32,*fp32,i32' --constexpr BLOCK=1024 --target cpu
The signature lists the run-time parameters in order: `*fp32` (a tensor of fp32), `i32`, `i64`,
`fp32`, `i1`; constexprs are given by name. A run-time parameter given with --constexpr is
specialised to that value (e.g. `-c stride=1`, as a launch does for ints equal to 1).
"""
from __future__ import annotations

import argparse
import ast
import sys

from . import dtypes as D
from .errors import TilejitError
from .frontend import ArgSpec, constexpr_params
from .jit import KernelFunction
from .loader import load_ref
from .target import get_target

_ALIASES = {"i32": "int32", "i64": "int64", "i1": "int1", "f32": "fp32", "f16": "fp16", "i8": "int8",
            "i16": "int16", "bool": "int1"}


def parse_type(text: str) -> D.dtype:
    text = text.strip()
    ptr = text.startswith("*")
    base = _ALIASES.get(text.lstrip("*"), text.lstrip("*"))
    dt = D.from_name(base)
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


def load_kernel(ref: str) -> KernelFunction:
    mod, _, attr = ref.partition(":")
    if not attr:
        raise SystemExit(f"expected MODULE:KERNEL, got {ref!r}")
    obj = load_ref(ref, "kernel")
    if not isinstance(obj, KernelFunction):
        raise SystemExit(f"{ref} is not a @kernel function")
    return obj


def specs_for(kfn: KernelFunction, signature: list[D.dtype], constexprs: dict) -> list[ArgSpec]:
    # a run-time parameter given with --constexpr is specialised to that value (as an int equal to
    # 1 is at a launch)
    cnames = constexpr_params(kfn.fn) | set(constexprs)
    runtime_names = [n for n in kfn.arg_names if n not in cnames]
    if len(signature) != len(runtime_names):
        raise SystemExit(f"kernel '{kfn.__name__}' has {len(runtime_names)} run-time parameters "
                         f"({', '.join(runtime_names)}); the signature gives {len(signature)}")
    specs, it = [], iter(signature)
    for n in kfn.arg_names:
        if n in cnames:
            if n not in constexprs:
                default = kfn.signature.parameters[n].default
                if default is kfn.signature.parameters[n].empty:
                    raise SystemExit(f"constexpr '{n}' needs a value: --constexpr {n}=...")
                constexprs[n] = default
            specs.append(ArgSpec(n, "constexpr", value=constexprs[n]))
        else:
            dt = next(it)
            specs.append(ArgSpec(n, "tensor" if dt.is_ptr() else "scalar", dtype=dt))
    return specs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.inspect", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="MODULE:KERNEL, e.g. examples.example_kernels:add_kernel")
    ap.add_argument("--signature", "-s", default="", help="run-time parameter types, comma-separated")
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
