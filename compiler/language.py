"""The tile language: the names a kernel body uses, spelled as in `triton.language`.

Kernels import it as `from compiler import language as tl`. A kernel written against
`triton.language` also compiles unchanged: the frontend maps Triton's builtins and dtypes to
these by name. Every builtin below only has meaning inside a `@kernel` body; calling one from
plain Python raises an error that says so. The docstrings state the allowed values.
"""
from __future__ import annotations

import types as _types

from .builtin_registry import BUILTINS, builtin  # noqa: F401  (BUILTINS: read through this module)
from .dtypes import (bfloat16, dtype, float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16,  # noqa: F401
                     float16, float32, float64, int1, int8, int16, int32, int64, pointer_type, uint8, uint16, uint32,
                     uint64)

# Triton spells some of these differently too.
bool_ = int1
pi32_t = pointer_type(int32)


class constexpr:
    """Marks a kernel parameter as a compile-time constant: `BLOCK: tl.constexpr`.

    Each distinct value compiles its own specialisation. `tl.constexpr(v)` inside a kernel is `v`.
    """

    def __init__(self, value=None):
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"


class static_range:
    """`for i in tl.static_range(start, stop, step)`: a loop unrolled at compile time.

    All three bounds must be constexpr integers; `i` is a Python int in each copy of the body.
    """

    def __init__(self, arg1, arg2=None, step=1):
        self.start, self.stop = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = step


class tensor:
    """The type of tile values, for annotations (`-> tl.tensor`, `x: tl.tensor`) and
    `isinstance(x, tl.tensor)` in a kernel (true for tensors); a kernel never constructs one."""


class tensor_descriptor:
    """The type of a tensor descriptor, for annotations (`desc: tl.tensor_descriptor`). Kernels make
    descriptors with tl.make_tensor_descriptor; a host TensorDescriptor argument is not supported."""


# loop options of tl.range, accepted for Triton compatibility: the gpu target forwards them to
# Triton's own tl.range, the C targets have no use for them
RANGE_OPTIONS = ("num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
                 "warp_specialize", "disable_licm")


class range:  # noqa: A001 - spelled as in triton.language
    """`for i in tl.range(start, stop, step, num_stages=..., ...)`: a run-time loop, as `range`.

    The loop options (num_stages, loop_unroll_factor, disallow_acc_multi_buffer, flatten,
    warp_specialize, disable_licm) must be constexprs; the gpu target passes them on to Triton,
    the cpu and kunlun targets ignore them.
    """

    def __init__(self, arg1, arg2=None, step=None, **options):
        self.args, self.options = (arg1, arg2, step), options


def range_options(kwargs: dict) -> dict:
    """The loop options among `kwargs` (tl.range's keywords), checked; the frontend's helper."""
    out = {}
    for k, v in kwargs.items():
        if k == "step":
            continue
        if k not in RANGE_OPTIONS:
            raise TypeError(f"tl.range() got an unexpected keyword argument '{k}' (loop options: "
                            f"{', '.join(RANGE_OPTIONS)})")
        if v is None or v is False:
            continue
        if not isinstance(v, (bool, int)):
            raise TypeError(f"tl.range option {k} must be a constexpr int or bool, got {v!r}")
        out[k] = v
    return out


@builtin
def program_id(axis):
    """The id of the running program along grid `axis` (0, 1 or 2), an int32 scalar."""


@builtin
def num_programs(axis):
    """The grid's extent along `axis` (0, 1 or 2), an int32 scalar."""


@builtin
def arange(start, end):
    """int32 tile [start, start+1, ..., end-1]; `start` and `end` must be constexpr ints, end > start."""


@builtin
def zeros(shape, dtype):
    """A tile of `shape` (a tuple of constexpr ints) filled with 0 of `dtype`."""


@builtin
def full(shape, value, dtype):
    """A tile of `shape` filled with `value` (a constexpr or a scalar) converted to `dtype`."""


@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    """Loads the elements `pointer` (a pointer scalar or tile, or a block pointer) points at.

    Where `mask` is false nothing is read and the result is `other` (0 when not given).
    `mask` and `other` broadcast to the pointer's shape; `other` is converted to the element type.
    With a block pointer, `boundary_check` lists the axes checked against its shape and
    `padding_option` ("zero" or "nan") fills what lies outside. Cache hints are accepted and ignored.
    """


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Stores `value` (broadcast and converted to the element type) where `mask` is true; through a
    block pointer, only inside its shape along the axes in `boundary_check`."""


@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=float32):
    """Matrix product of 2-D tiles [M, K] @ [K, N] accumulated in fp32 (int32 for integers).

    With `acc` the products are added to it in ascending k. `input_precision` / `allow_tf32`
    are accepted for Triton compatibility; the cpu and kunlun targets always compute in IEEE fp32.
    """


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None):
    """Sum along `axis` (all axes when None). fp16/bf16 accumulate in fp32 and round once."""


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """Maximum along `axis` (all axes when None): NaN elements are ignored (NaN only when all are);
    with `return_indices`, (maximum, int32 index of its first occurrence), as tl.argmax."""


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """Minimum along `axis` (all axes when None), NaN as tl.max; with `return_indices`, (minimum, index)."""


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    """int32 index of the maximum along `axis`: NaN elements are ignored, ties give the lowest
    index (whatever `tie_break_left` says), an all-NaN slice gives 0."""


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    """int32 index of the minimum along `axis` (NaN and ties as tl.argmax)."""


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None):
    """Inclusive prefix sums along `axis`, added in index order (from the end with `reverse`);
    fp16/bf16 accumulate in fp32 and round each output once, small ints sum in int32."""


@builtin
def reshape(input, *shape, can_reorder=False):
    """The elements of `input` in row-major order, as a tile of `shape`."""


@builtin
def view(input, *shape):
    """As reshape."""


@builtin
def join(a, b):
    """Stacks two tiles of one shape along a new last axis of size 2."""


@builtin
def split(a):
    """The two halves of a tile whose last axis has size 2 (the inverse of join)."""


@builtin
def interleave(a, b):
    """Interleaves two tiles along their last axis: [a0, b0, a1, b1, ...]."""


@builtin
def ravel(x, can_reorder=False):
    """The tile as 1-D, row-major."""


@builtin
def zeros_like(input):
    """A tile of zeros of `input`'s shape and dtype."""


@builtin
def full_like(input, value, dtype=None):
    """A tile of `input`'s shape filled with `value`."""


class PropagateNan:
    """`propagate_nan=` of tl.maximum / tl.minimum / tl.clamp: NONE (the default) ignores a NaN
    operand, ALL makes the result NaN when any operand is (compiler/value_rules.py)."""

    NONE = 0x0000
    ALL = 0xFFFF


def propagates_nan(v) -> bool:
    """Whether a `propagate_nan=` value (ours, Triton's enum member, or its int) is ALL."""
    if v is None:
        return False
    name = getattr(v, "name", None)
    if isinstance(name, str):
        return name == "ALL"
    if v in (PropagateNan.NONE, PropagateNan.ALL):
        return v == PropagateNan.ALL
    raise ValueError(f"propagate_nan must be tl.PropagateNan.NONE or tl.PropagateNan.ALL, got {v!r}")


@builtin
def clamp(x, min, max, propagate_nan=PropagateNan.NONE):  # noqa: A002
    """minimum(maximum(x, min), max) under `propagate_nan` (NONE: a NaN x gives min; ALL: NaN)."""


def _unary_doc(name, what):
    def f(x):
        pass
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise {what}. fp16/bf16 inputs are computed in fp32 and rounded once."
    return builtin(f)


exp = _unary_doc("exp", "e**x")
tanh = _unary_doc("tanh", "hyperbolic tangent")
erf = _unary_doc("erf", "error function")
log1p = _unary_doc("log1p", "log(1 + x), accurate near 0")
expm1 = _unary_doc("expm1", "e**x - 1, accurate near 0")
trunc = _unary_doc("trunc", "round toward zero")
rint = _unary_doc("rint", "round to the nearest integer, ties to even")
exp2 = _unary_doc("exp2", "2**x")
log = _unary_doc("log", "natural logarithm")
log2 = _unary_doc("log2", "base-2 logarithm")
sqrt = _unary_doc("sqrt", "square root")
rsqrt = _unary_doc("rsqrt", "1/sqrt(x)")
abs = _unary_doc("abs", "absolute value (integers too)")
sigmoid = _unary_doc("sigmoid", "1/(1+exp(-x))")
sin = _unary_doc("sin", "sine")
cos = _unary_doc("cos", "cosine")
floor = _unary_doc("floor", "round down")
ceil = _unary_doc("ceil", "round up")


@builtin
def pow(x, y):  # noqa: A001
    """Elementwise x**y (floats)."""


@builtin
def umulhi(x, y):
    """The high half of the double-width product of two 32- or 64-bit integer tiles read as unsigned."""


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    """`input` converted to `dtype` (as `x.to(dtype)`); with `bitcast=True` its bits reinterpreted
    as `dtype` (same width). Narrowing float conversions round to nearest even."""


@builtin
def where(condition, x, y):
    """Elementwise `x` where `condition` (int1) is true, else `y`; all three broadcast."""


@builtin
def maximum(x, y, propagate_nan=PropagateNan.NONE):
    """Elementwise maximum. Floats: a NaN operand is ignored (IEEE maxNum; NaN only when both are),
    or with `propagate_nan=tl.PropagateNan.ALL` makes the result NaN; equal operands (+0.0 and
    -0.0) give `y`."""


@builtin
def minimum(x, y, propagate_nan=PropagateNan.NONE):
    """Elementwise minimum; NaN as for tl.maximum."""


@builtin
def fma(x, y, z):
    """Elementwise x*y+z with one rounding."""


@builtin
def cdiv(x, div):
    """Ceiling division; constexpr in, constexpr out; on tiles (x + div - 1) // div."""


@builtin
def broadcast_to(input, *shape):
    """Broadcasts `input` to `shape` (size-1 axes repeat)."""


@builtin
def expand_dims(input, axis):
    """Inserts a size-1 axis at `axis` (or at each of a tuple of axes, as positions in the result;
    negative ones count from its end); `x[:, None]` is the same."""


@builtin
def trans(input, *dims):
    """Transposes a 2-D tile (or permutes axes by `dims`)."""


permute = trans


@builtin
def multiple_of(input, values):
    """Hint that `input` is a multiple of `values`; accepted and returned unchanged."""


@builtin
def max_contiguous(input, values):
    """Hint about contiguity; accepted and returned unchanged."""


@builtin
def max_constancy(input, values):
    """Hint about constancy; accepted and returned unchanged."""


@builtin
def assume(cond):
    """A hint; accepted and ignored."""


@builtin
def debug_barrier():
    """Orders the program's memory accesses before and after it (the gpu target synchronises its
    threads; the cpu and kunlun targets run a program's accesses in order anyway)."""


@builtin
def device_print(prefix, *args, hex=False):  # noqa: A002
    """Prints `prefix` and every element of `args` with its program id and index (cpu and gpu;
    the kunlun target does not print)."""


@builtin
def device_assert(cond, msg="", mask=None):
    """Fails the launch with `msg` where `cond` is false (cpu: always checked; gpu: as Triton, when
    its debug mode is on; kunlun: not checked)."""


@builtin
def static_assert(cond, msg=""):
    """Fails compilation with `msg` when the constexpr `cond` is false."""


@builtin
def static_print(*values):
    """Prints constexpr values while the kernel compiles."""


# -- random numbers: Philox 4x32-10, the bits of Triton's generator --------------------------------
@builtin
def randint(seed, offset, n_rounds=10):
    """Random uint32 bits for each element of `offset` (an integer tile) under `seed` (an integer
    scalar): the first word of Philox 4x32 with `n_rounds` rounds, as Triton's tl.randint."""


@builtin
def randint4x(seed, offset, n_rounds=10):
    """The four Philox words of `randint` (a tuple of four uint32 tiles)."""


@builtin
def rand(seed, offset, n_rounds=10):
    """Uniform fp32 in [0, 1) from `randint`."""


@builtin
def rand4x(seed, offsets, n_rounds=10):
    """Four uniform fp32 tiles from `randint4x`."""


@builtin
def randn(seed, offset, n_rounds=10):
    """Standard normal fp32 (Box-Muller over two Philox words; uses log, sqrt, sin, cos)."""


@builtin
def randn4x(seed, offset, n_rounds=10):
    """Four standard normal fp32 tiles."""


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=10):
    """Philox 4x32 of the counters c0..c3 (32-bit integer tiles) under `seed`: four uint32 tiles."""


@builtin
def uint_to_uniform_float(x):
    """32- (or 64-) bit random integers -> uniform fp32 in [0, 1)."""


@builtin
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two uniform tiles -> two standard normal tiles."""


# -- block pointers and tensor descriptors -----------------------------------------------------------
@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order):
    """A pointer to the `block_shape` block at `offsets` of the tensor at `base` with `shape` and
    `strides` (scalars per axis); load/store it with `boundary_check` for edge blocks."""


@builtin
def advance(base, offsets):
    """The block pointer `base` moved by `offsets` (one per axis)."""


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"):
    """A descriptor of the tensor at `base` (shape, strides per axis) that loads and stores blocks of
    `block_shape`: `desc.load(offsets)` (zero outside the tensor), `desc.store(offsets, value)`."""


@builtin
def load_tensor_descriptor(desc, offsets):
    """desc.load(offsets)."""


@builtin
def store_tensor_descriptor(desc, offsets, value):
    """desc.store(offsets, value)."""


# -- atomics: read-modify-write of global memory, returning the old values -------------------------
# Outside the determinism contract: the order in which programs update one address is the
# hardware's. The strict policy refuses a floating-point atomic_add.
def _atomic_doc(name, what):
    def f(pointer, val, mask=None, sem=None, scope=None):
        pass
    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"Atomically {what} at `pointer` where `mask` is true; returns the old values "
                 "(sem/scope are accepted: the targets use acquire-release order).")
    return builtin(f)


atomic_add = _atomic_doc("atomic_add", "adds `val`")
atomic_max = _atomic_doc("atomic_max", "stores the maximum of the old value and `val`")
atomic_min = _atomic_doc("atomic_min", "stores the minimum of the old value and `val`")
atomic_xchg = _atomic_doc("atomic_xchg", "stores `val`")
atomic_and = _atomic_doc("atomic_and", "ands in `val` (integers)")
atomic_or = _atomic_doc("atomic_or", "ors in `val` (integers)")
atomic_xor = _atomic_doc("atomic_xor", "xors in `val` (integers)")


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None):
    """Atomically stores `val` at `pointer` where the old value equals `cmp`; returns the old values."""


# -- namespaces: tl.math and libdevice --------------------------------------------------------------
# libdevice names that are another builtin here (an alias) or that this language does not have
LIBDEVICE_ALIASES = {
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_powf": "pow", "fast_dividef": "fdiv",
    "fast_sinf": "sin", "fast_cosf": "cos", "div_rn": "fdiv", "sqrt_rn": "sqrt", "rsqrt_rn": "rsqrt",
    "nearbyint": "rint", "fmod": "_fmod", "fma_rn": "fma", "exp2": "exp2", "llrint": "_llrint",
    "isnan": "_isnan", "isinf": "_isinf", "signbit": "_signbit", "finitef": "_isfinite",
    "isfinited": "_isfinite", "copysign": "_copysign", "fdiv": "fdiv",
}
LIBDEVICE = ("abs", "floor", "ceil", "trunc", "rint", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin",
             "cos", "tanh", "erf", "log1p", "expm1", "pow", "fma") + tuple(LIBDEVICE_ALIASES)
MATH = ("umulhi", "exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "sqrt_rn", "rsqrt", "abs", "fdiv",
        "div_rn", "erf", "floor", "ceil", "fma")


@builtin
def fdiv(x, y, ieee_rounding=False, approx=False):
    """x / y in floating point (correctly rounded on every target)."""


@builtin
def _fmod(x, y):
    """libdevice.fmod: the remainder of x / y with the sign of x (floats)."""


@builtin
def _llrint(x):
    """libdevice.llrint: rint(x) as int64."""


@builtin
def _isnan(x):
    """libdevice.isnan as int1."""


@builtin
def _isinf(x):
    """libdevice.isinf as int1."""


@builtin
def _isfinite(x):
    """libdevice.finitef / isfinited as int1."""


@builtin
def _signbit(x):
    """libdevice.signbit as int1 (true for -0.0 and negative NaNs too)."""


@builtin
def _copysign(x, y):
    """libdevice.copysign: |x| with the sign bit of y."""


div_rn = fdiv
sqrt_rn = sqrt


def function_named(name: str):
    """The builtin a Triton function of this name is (libdevice names through their aliases), or None."""
    return BUILTINS.get(LIBDEVICE_ALIASES.get(name, name))


def _namespace(name: str, names) -> _types.ModuleType:
    mod = _types.ModuleType(name, f"tl.{name.rsplit('.', 1)[-1]}: {', '.join(sorted(names))}")
    for n in names:
        setattr(mod, n, function_named(n))
    return mod


math = _namespace("compiler.language.math", MATH)
extra = _types.ModuleType("compiler.language.extra", "tl.extra: libdevice (also as extra.cuda / extra.hip)")
extra.libdevice = _namespace("compiler.language.extra.libdevice", LIBDEVICE)
extra.cuda = _types.ModuleType("compiler.language.extra.cuda")
extra.hip = _types.ModuleType("compiler.language.extra.hip")
extra.cuda.libdevice = extra.hip.libdevice = extra.libdevice
NAMESPACES = (math, extra, extra.libdevice, extra.cuda, extra.hip)


# builtins made of the IR's own ops (tl.reduce, tl.gather, tl.cat, ...): declared in their own module
from .language_combine import (broadcast, cat, gather, histogram, item, reduce, reduce_or, squeeze,  # noqa: E402,F401
                               unsqueeze, xor_sum)
