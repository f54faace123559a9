"""What names and attributes mean in a kernel body: Triton's `triton.language` objects mapped onto
ours (modules, dtypes, constexprs, builtins, tl.math / libdevice), attributes of tiles (dtype,
shape, T and the tensor methods), of dtypes, of Python numbers (`eps.to(tl.float32)` on a
specialised constant), and "did you mean" suggestions for misspelt names."""
from __future__ import annotations

import difflib
import types

from . import dtypes as D
from . import language as lang
from .builtins_common import BlockType
from .semantic import SemanticError, Tile

# Triton's module names -> our namespace objects
_MODULES = {
    "triton.language": lang, "triton.language.core": lang, "triton.language.math": lang.math,
    "triton.language.extra": lang.extra, "triton.language.extra.libdevice": lang.extra.libdevice,
    "triton.language.extra.cuda": lang.extra.cuda, "triton.language.extra.cuda.libdevice": lang.extra.libdevice,
    "triton.language.extra.hip": lang.extra.hip, "triton.language.extra.hip.libdevice": lang.extra.libdevice,
}
_NAMESPACE_PREFIX = {id(lang): "tl.", id(lang.math): "tl.math.", id(lang.extra): "tl.extra.",
                     id(lang.extra.libdevice): "libdevice.", id(lang.extra.cuda): "tl.extra.cuda.",
                     id(lang.extra.hip): "tl.extra.hip."}
# tensor methods: `x.name(...)` is `tl.name(x, ...)`
TILE_METHODS = {"to", "cast", "sum", "max", "min", "argmax", "argmin", "cumsum", "trans", "permute", "expand_dims",
                "broadcast_to", "reshape", "view", "ravel", "split", "exp", "exp2", "log", "log2", "sqrt", "rsqrt",
                "abs", "sigmoid", "sin", "cos", "floor", "ceil", "erf", "tanh", "log1p", "expm1", "store",
                "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or",
                "atomic_xor", "advance", "reduce", "xor_sum", "reduce_or", "histogram", "gather", "item"}
_NUMBER_METHODS = {"to", "cast"}
# Triton's dtype attributes a kernel may read at compile time (their values are constexprs)
_DTYPE_ATTRS = ("is_floating", "is_int", "is_ptr", "is_bool", "primitive_bitwidth", "name", "itemsize",
                "int_bitwidth", "fp_mantissa_width", "exponent_bias", "scalar", "is_fp8", "is_standard_floating",
                "is_int_signed", "is_int_unsigned", "get_int_max_value", "get_int_min_value", "is_block",
                "is_const", "address_space", "is_dtype")


def did_you_mean(name: str, candidates, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def map_global(obj):
    """Maps Triton's language objects onto ours, so Triton kernels compile unchanged."""
    if isinstance(obj, types.ModuleType):
        if id(obj) in _NAMESPACE_PREFIX:
            return obj
        return _MODULES.get(obj.__name__, obj)
    if isinstance(obj, lang.constexpr):
        return obj.value
    mod = getattr(type(obj), "__module__", "") or ""
    if mod.startswith("triton.language"):
        tname = type(obj).__name__
        if tname in ("dtype", "pointer_type"):
            try:
                return D.from_name(str(obj))
            except ValueError:
                raise SemanticError(f"dtype {obj} is not supported; the tile language has "
                                    "fp64/fp32/fp16/bf16/fp8e5/fp8e4nv, int1/8/16/32/64 and uint8/16/32/64") from None
        if tname == "constexpr":
            return obj.value
    fmod = getattr(obj, "__module__", "") or ""
    if fmod.startswith("triton") and getattr(obj, "__name__", None) and (callable(obj) or isinstance(obj, type)):
        name = obj.__name__
        if name in ("static_range", "constexpr", "range", "tensor"):
            return getattr(lang, name)
        found = lang.function_named(name)
        if found is not None:
            return found
    return obj


def namespace_attr(base, attr: str):
    """`tl.x`, `tl.math.x`, `libdevice.x`: the object, or a SemanticError naming it with a suggestion."""
    prefix = _NAMESPACE_PREFIX[id(base)]
    v = getattr(base, attr, None)
    if v is None and base is not lang:   # tl.math.tanh and the like: the builtin of that name
        v = lang.function_named(attr)
    if v is None and missing_builtin(prefix, attr):
        raise SemanticError(missing_builtin(prefix, attr))
    if v is None:
        names = [n for n in dir(base) if not n.startswith("_") and getattr(base, n, None) is not None]
        hint = did_you_mean(attr, names, prefix)
        raise SemanticError(f"{prefix}{attr} is not part of the tile language{hint or ''}"
                            + ("" if hint else " (see the supported subset in docs/language.md)"))
    return v


def is_namespace(obj) -> bool:
    return isinstance(obj, types.ModuleType) and id(obj) in _NAMESPACE_PREFIX


class BoundMethod:
    """`tile.name` before it is called: calls `tl.name(tile, ...)`."""

    def __init__(self, tile: Tile, name: str):
        self.tile, self.name = tile, name

    def call(self, visitor, node, args, kwargs):
        from .builtins_impl import call_builtin  # noqa: PLC0415
        if self.name == "to":
            return call_builtin(visitor, node, "_to", [self.tile] + args, kwargs)
        if self.name == "permute":
            return call_builtin(visitor, node, "trans", [self.tile] + args, kwargs)
        return call_builtin(visitor, node, self.name, [self.tile] + args, kwargs)


def tile_attr(builder, base: Tile, attr: str):
    if attr == "dtype":
        return base.dtype
    if attr == "shape":
        return base.shape
    if attr == "numel":
        return base.type.numel
    if attr == "type":   # Triton's tensor.type: the dtype of a scalar, a block type of a tile
        return base.dtype if not base.shape else BlockType(base.dtype, tuple(base.shape))
    if attr == "T":
        return builder.op1("trans", [base], {"perm": list(reversed(range(len(base.shape))))})
    if attr in TILE_METHODS:
        return BoundMethod(base, attr)
    raise SemanticError(f"tensor values have no attribute '{attr}'"
                        + did_you_mean(attr, list(TILE_METHODS) + ["dtype", "shape", "type", "T"], "."))


class _HostMethod:
    """A dtype's method (`is_fp16`, `get_int_max_value`, ...) called in a kernel: run at compile time."""

    __tilejit_method__ = True

    def __init__(self, f):
        self.fn = lambda builder, *args, **kwargs: f(*args, **kwargs)


def other_attr(builder, base, attr: str):
    """Attributes of dtypes, Python numbers, aggregates, namespaces and other Python objects."""
    if isinstance(base, D.dtype):
        if attr == "element_ty" and base.is_ptr():
            return base.element_ty
        if attr in _DTYPE_ATTRS or (attr.startswith("is_") and hasattr(base, attr)):   # is_fp16(), is_uint8(), ...
            v = getattr(base, attr)
            return _HostMethod(v) if callable(v) and not isinstance(v, D.dtype) else v
        raise SemanticError(f"dtype has no attribute '{attr}'" + did_you_mean(attr, _DTYPE_ATTRS, "."))
    if isinstance(base, (int, float)) and attr in _NUMBER_METHODS:
        return BoundMethod(builder.to_tile(base), attr)   # a specialised constant used as a scalar
    if isinstance(base, (int, float)) and attr == "dtype":   # the dtype the constant gets as a tensor
        from .semantic import scalar_dtype_of  # noqa: PLC0415
        return scalar_dtype_of(base)
    if hasattr(base, "tj_attr"):
        return base.tj_attr(attr)
    if is_namespace(base):
        return namespace_attr(base, attr)
    return map_global(getattr(base, attr))


# constructs outside the tile language: what to write instead
UNSUPPORTED = {
    "Break": "'break' is not supported in a kernel: put the exit test into the loop's condition "
             "(`while i < n and not done:`) or guard the rest of the body with an `if`",
    "Continue": "'continue' is not supported in a kernel: guard the rest of the loop body with an `if`",
    "Try": "'try' is not supported in a kernel: kernels do not raise or catch exceptions "
           "(tl.static_assert checks constexprs, tl.device_assert run-time values)",
    "Raise": "'raise' is not supported in a kernel: use tl.static_assert (compile time) or tl.device_assert "
             "(run time)",
    "With": "'with' is not supported in a kernel",
    "Lambda": "lambda is not supported in a kernel: define a helper function at module level (it is inlined)",
    "FunctionDef": "a function defined inside a kernel is not supported: define it at module level (calls to it "
                   "are inlined)",
    "ClassDef": "a class defined inside a kernel is not supported",
    "ListComp": "comprehensions are not supported in a kernel: write a tl.static_range loop",
    "SetComp": "comprehensions are not supported in a kernel: write a tl.static_range loop",
    "DictComp": "comprehensions are not supported in a kernel: write a tl.static_range loop",
    "GeneratorExp": "generator expressions are not supported in a kernel: write a tl.static_range loop",
    "Dict": "dict displays are not supported in a kernel: pass constexprs or tuples",
    "Set": "set displays are not supported in a kernel: use a tuple",
    "Global": "'global' is not supported in a kernel: kernels read module globals (constexprs) but do not assign them",
    "Nonlocal": "'nonlocal' is not supported in a kernel",
    "Delete": "'del' is not supported in a kernel",
    "NamedExpr": "assignment expressions (:=) are not supported in a kernel: assign on a line of its own",
    "Await": "'await' is not supported in a kernel", "Yield": "'yield' is not supported in a kernel",
    "YieldFrom": "'yield from' is not supported in a kernel",
    "Match": "'match' is not supported in a kernel: use if/elif",
    "Starred": "'*' unpacking is supported only in call arguments",
    "AsyncFor": "'async for' is not supported in a kernel", "AsyncWith": "'async with' is not supported in a kernel",
}


def unsupported(node) -> str:
    what = type(node).__name__
    return UNSUPPORTED.get(what, f"unsupported construct '{what}' in a kernel body (see the supported subset "
                                 "in docs/language.md)")


# Triton builtins this language does not have, and what to use instead
MISSING_BUILTINS = {
    "associative_scan": "use tl.cumsum for prefix sums, or tl.reduce for one combined value",
    "sort": "sorting is not supported", "topk": "use tl.max with return_indices repeatedly",
    "flip": "index with a reversed arange instead",
    "dot_scaled": "scaled (microscaling) dots are not supported: convert the operands and use tl.dot",
    "inline_asm_elementwise": "inline assembly is not portable",
    "map_elementwise": "write the elementwise function as a helper", "cumprod": "cumprod is not supported",
    "softmax": "write exp(x - max) / sum", "swizzle2d": "compute the program ids with // and %",
    "atomic_load": "use tl.atomic_add(ptr, 0)", "atomic_store": "use tl.atomic_xchg",
    "atomic_poll": "its timeout needs a device timer; without one, spin with "
                   "`while tl.atomic_cas(ptr, expected, expected) != expected: pass`",
    "expect_zero": "not supported", "condition": "not supported", "dispatch": "not supported",
    "extern_elementwise": "not supported", "empty": "use tl.zeros",
}


def missing_builtin(prefix: str, name: str) -> str | None:
    alt = MISSING_BUILTINS.get(name)
    return None if alt is None else f"{prefix}{name} is not supported by the tile language: {alt}"
