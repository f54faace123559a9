"""The value rules: what a kernel computes where C, numpy, Triton's GPU backend and Triton's
interpreter could disagree. Stated once here; every target implements them, and
tests/test_value_rules.py checks every target against Triton's interpreter over the dtypes (and,
where the interpreter has no defined answer, against numpy written to these rules).
docs/numerics.md ("Value rules") shows the same table.

NaN (floating point, every float dtype)
- `tl.maximum` / `tl.minimum` (propagate_nan=NONE, the default): IEEE maxNum / minNum, numpy's
  fmax / fmin: a NaN operand is ignored, NaN only when both are; equal operands (+0.0 and -0.0)
  give the second. `propagate_nan=tl.PropagateNan.ALL`: NaN when either operand is NaN.
- `tl.max` / `tl.min` reductions: NaN elements are ignored (numpy's nanmax); NaN only when every
  element is NaN. With PropagateNan.ALL: NaN when any element is.
- `tl.argmax` / `tl.argmin` (and max/min with return_indices): NaN elements are ignored, the
  index is the lowest among the elements equal to the extreme (+0.0 equals -0.0), whatever
  tie_break_left says; an all-NaN slice gives index 0 and value NaN (Triton's interpreter raises
  there).
- `tl.clamp(x, lo, hi)`: minimum(maximum(x, lo), hi) under the same propagate_nan.
- float -> integer conversion truncates toward zero; NaN gives 0 and out-of-range values
  saturate to the integer type's limits (as CUDA's cvt.rzi; numpy and the interpreter leave
  these undefined).

Integers (every width, signed and unsigned)
- +, -, *, neg, abs wrap modulo 2**bits of the operation's type (abs(INT_MIN) is INT_MIN); the
  operation's type is Triton's promotion of the operands (int8 + int8 is int8, so it wraps at 8
  bits; an unsigned type wins over a signed one at least as narrow).
- int1 arithmetic stays int1 and wraps modulo 2: True + True is False, -True is True, + and -
  are xor, * and // are and, % is 0. `/` divides in fp32.
- // and % truncate toward zero (C's, Triton's); a zero divisor gives 0 for both; INT_MIN // -1
  wraps to INT_MIN and INT_MIN % -1 is 0.
- << and >> by an amount outside [0, bits) give 0, except >> of a negative signed value (-1);
  >> is arithmetic when the left operand's own type is signed, logical otherwise, on the bits of
  the promoted type (int8 >> uint8 shifts the sign in, and the result reads as uint8), as Triton.
- integer -> narrower integer conversion keeps the low bits; int1 -> integer gives 0 or 1, and
  any value -> int1 is `value != 0`.

The fast policy's reductions may combine in any fixed order, so the sign of a zero result among
equal +0.0/-0.0 elements of a max/min reduction is fixed per target but not across them.
"""
from __future__ import annotations

from . import dtypes as D
from .ir import Block, Function, Op
from .ir.ops import REDUCE
from .passes import replace_all_uses
from .semantic import Builder, Tile


def lower_nan_reductions(fn: Function) -> None:
    """Float max/min reductions -> a reduction of the elements with NaN replaced by the identity
    (-inf / +inf), plus a count of the non-NaN elements that turns an all-NaN result into NaN.
    Afterwards a reduce max/min never sees a NaN, so targets combine with a plain comparison
    (and vectorise it). Targets whose own max/min reductions already follow the rule skip this
    (`Target.nan_ignoring_reductions`)."""
    _rewrite(fn, fn.body)


def _rewrite(fn: Function, block: Block) -> None:
    out: list[Op] = []
    for op in block.ops:
        for sub in op.blocks:
            _rewrite(fn, sub)
        x = op.operands[0] if op.operands else None
        if op.name != REDUCE or op.attrs["kind"] not in ("max", "min") or not x.dtype.is_floating():
            out.append(op)
            continue
        tmp = Block()
        b = Builder(tmp)
        b.loc = op.loc
        t = Tile(x)
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        is_nan = b.binary("ne", t, t)
        clean = b.where(is_nan, float("-inf") if kind == "max" else float("inf"), t)
        r = b.op1("reduce", [clean], dict(op.attrs))
        seen = b.op1("reduce", [b.cast(b.binary("eq", t, t), D.int32)], {"axis": axis, "kind": "sum"})
        y = b.where(b.binary("ne", seen, 0), r, float("nan"))
        out.extend(tmp.ops)
        replace_all_uses(fn, op.results[0], y.value)
    block.ops = out

