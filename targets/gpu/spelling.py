"""How the gpu target spells the Tile IR in Triton: dtypes, the op table (op -> Triton expression
over operand expressions {0}, {1}, {2}), the strict overrides, and the generated source's names."""
from __future__ import annotations

import keyword
import re

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Function
from compiler.ir.ops import COMPARE, ROUNDS

TL_DTYPES = {D.float64: "tl.float64", D.float32: "tl.float32", D.float16: "tl.float16", D.bfloat16: "tl.bfloat16",
             D.int1: "tl.int1", D.int8: "tl.int8", D.int16: "tl.int16", D.int32: "tl.int32", D.int64: "tl.int64",
             D.float8e5: "tl.float8e5", D.float8e4nv: "tl.float8e4nv", D.uint8: "tl.uint8", D.uint16: "tl.uint16",
             D.uint32: "tl.uint32", D.uint64: "tl.uint64"}
SIG_NAMES = {D.float64: "fp64", D.float32: "fp32", D.float16: "fp16", D.bfloat16: "bf16", D.int1: "i1",
             D.int8: "i8", D.int16: "i16", D.int32: "i32", D.int64: "i64", D.float8e5: "fp8e5", D.float8e4nv: "fp8e4nv",
             D.uint8: "u8", D.uint16: "u16", D.uint32: "u32", D.uint64: "u64"}
NARROW_FLOATS = (D.float16, D.bfloat16)
MAX_NUMEL = 1 << 20   # Triton's largest tile

# -- the op table: op -> Triton expression over operand expressions {0}, {1}, {2} -------------------
BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "mod": "{0} % {1}",
    "floordiv": "{0} // {1}", "and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}",
    "shl": "{0} << {1}", "shr": "{0} >> {1}",
    "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}", "ge": "{0} >= {1}", "eq": "{0} == {1}",
    "ne": "{0} != {1}", "max": "tl.maximum({0}, {1})", "min": "tl.minimum({0}, {1})",
    "pow": "tl.extra.libdevice.pow({0}, {1})", "umulhi": "tl.umulhi({0}, {1})",
}
UNARY = {
    "neg": "-{0}", "not": "~{0}", "abs": "tl.abs({0})", "exp": "tl.exp({0})", "exp2": "tl.exp2({0})",
    "log": "tl.log({0})", "log2": "tl.log2({0})", "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})",
    "sigmoid": "tl.sigmoid({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})", "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})", "erf": "tl.math.erf({0})", "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    # libdevice: compiled kernels only (the interpreter gets compiler/strict.py's sequences instead)
    "tanh": "tl.extra.libdevice.tanh({0})", "log1p": "tl.extra.libdevice.log1p({0})",
    "expm1": "tl.extra.libdevice.expm1({0})", "rint": "tl.extra.libdevice.rint({0})",
}
TERNARY = {"where": "tl.where({0}, {1}, {2})", "fma": "tl.fma({0}, {1}, {2})"}
# strict overrides (float operands): correctly rounded division/sqrt, the C targets' max/min
# selection (maxNum / minNum, ties give the second operand: compiler/value_rules.py)
STRICT_FLOAT = {"div": "tl.div_rn({0}, {1})", "sqrt": "tl.sqrt_rn({0})",
                "max": "tl.where(({0} > {1}) | ({1} != {1}), {0}, {1})",
                "min": "tl.where(({0} < {1}) | ({1} != {1}), {0}, {1})"}
# float ops whose fp16/bf16 result is computed in fp32 and rounded once
ROUNDING = ROUNDS
# bf16 ops that are exact but also go through fp32: Triton's interpreter keeps bf16 as raw uint16
# bits, so its numpy comparisons/negation/max of bf16 would compare integers
BF16_EXACT = {"neg", "abs", "floor", "ceil", "max", "min"} | COMPARE
# exact ops whose Triton functions take fp32 only: fp16/bf16 operands are widened first
EXACT_VIA_F32 = {"trunc", "rint", "floor", "ceil"}
# ops rendered by a method rather than a table entry
SPECIAL = {"const", "arange", "program_id", "num_programs", "cast", "bitcast", "broadcast", "expand_dims",
           "trans", "load", "store", "reduce", "dot", "for", "while", "if", "yield", "reshape", "join", "split",
           "argreduce", "scan", "atomic_rmw", "atomic_cas", "barrier", "print", "assert"}
# every op of compiler.ir.ops.OPS is covered here or rejected with a reason (a test checks it)
COVERED = set(BINARY) | set(UNARY) | set(TERNARY) | SPECIAL
REJECTED: dict[str, str] = {}

_RESERVED = set(keyword.kwlist) | {"tl", "triton", "range", "float", "int", "bool", "len", "min", "max", "abs",
                                   "print", "None", "True", "False"}


def tl_dtype(dt: D.dtype) -> str:
    if dt.is_ptr():
        return f"tl.pointer_type({tl_dtype(dt.element_ty)})"
    try:
        return TL_DTYPES[dt]
    except KeyError:
        raise CompilationError(f"dtype {dt} is not supported by the gpu target") from None


def triton_signature_type(dt: D.dtype) -> str:
    """Triton's signature spelling of a kernel parameter type (`*fp32`, `i32`, ...)."""
    if dt.is_ptr():
        return "*" + SIG_NAMES[dt.element_ty]
    return SIG_NAMES[dt]


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _bshape(shapes):
    """numpy-style broadcast of shapes that are () or of one rank with 1s; None if they do not fit."""
    out: tuple = ()
    for s in shapes:
        if not s:
            continue
        if not out:
            out = tuple(s)
            continue
        if len(s) != len(out):
            return None
        res = []
        for a, b in zip(out, s):
            if a != b and 1 not in (a, b):
                return None
            res.append(max(a, b))
        out = tuple(res)
    return out


_GENERATED = re.compile(r"v\d+(_|$)")   # the renderer's value names: vN, vN_suffix


def param_names(fn: Function) -> list[str]:
    """The Python names of the kernel's parameters in the generated source (IR names, with a
    trailing _ where one would clash with Python, `tl`/`triton` or the generated `vN` names)."""
    out: list[str] = []
    for p in fn.params:
        name = p.name
        while name in _RESERVED or name in out or _GENERATED.match(name):
            # a trailing _ cannot take `v2` out of the generated names (`v2_x` is one): prefix it
            name = "p" + name if _GENERATED.match(name) else name + "_"
        out.append(name)
    return out
