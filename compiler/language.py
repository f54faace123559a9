"""The tile language: the names a kernel body uses, spelled as in `triton.language`.

Kernels import it as `from compiler import language as tl`. A kernel written against
`triton.language` also compiles unchanged: the frontend maps Triton's builtins and dtypes to
these by name. Every builtin below only has meaning inside a `@kernel` body; calling one from
plain Python raises an error that says so. The docstrings state the allowed values.
"""
from __future__ import annotations

import functools

from .dtypes import (bfloat16, dtype, float16, float32, float64, int1, int8, int16, int32, int64,  # noqa: F401
                     pointer_type)

# Triton spells some of these differently too.
bool_ = int1
float8 = None  # not supported; present so `tl.float8` gives a clear error rather than AttributeError


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
    """The type of tile values, for annotations (`-> tl.tensor`, `x: tl.tensor`); a kernel never
    constructs one, and annotations are not checked."""


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


BUILTINS: dict[str, object] = {}


def builtin(fn):
    """Registers a tile-language builtin; its Python body is never run."""

    @functools.wraps(fn)
    def outside(*args, **kwargs):
        raise RuntimeError(
            f"tl.{fn.__name__} can only be called inside a @kernel function body "
            "(did you forget the @kernel decorator?)")

    outside.__tilejit_builtin__ = fn.__name__
    BUILTINS[fn.__name__] = outside
    return outside


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
def load(pointer, mask=None, other=None, cache_modifier="", eviction_policy="", volatile=False):
    """Loads the elements `pointer` (a pointer scalar or tile) points at.

    Where `mask` is false nothing is read and the result is `other` (0 when not given).
    `mask` and `other` broadcast to the pointer's shape; `other` is converted to the element type.
    Cache hints are accepted and ignored.
    """


@builtin
def store(pointer, value, mask=None, cache_modifier="", eviction_policy=""):
    """Stores `value` (broadcast and converted to the element type) where `mask` is true."""


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
def max(input, axis=None, return_indices=False, keep_dims=False):
    """Maximum along `axis` (all axes when None)."""


@builtin
def min(input, axis=None, return_indices=False, keep_dims=False):
    """Minimum along `axis` (all axes when None)."""


def _unary_doc(name, what):
    def f(x):
        pass
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise {what}. fp16/bf16 inputs are computed in fp32 and rounded once."
    return builtin(f)


exp = _unary_doc("exp", "e**x")
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
def where(condition, x, y):
    """Elementwise `x` where `condition` (int1) is true, else `y`; all three broadcast."""


@builtin
def maximum(x, y):
    """Elementwise maximum."""


@builtin
def minimum(x, y):
    """Elementwise minimum."""


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
    """Inserts a size-1 axis at `axis`; `x[:, None]` is the same."""


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
def static_assert(cond, msg=""):
    """Fails compilation with `msg` when the constexpr `cond` is false."""


@builtin
def static_print(*values):
    """Prints constexpr values while the kernel compiles."""
