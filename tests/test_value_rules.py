"""The value rules of compiler/value_rules.py, as a table over dtypes: every target's results
against Triton's own interpreter (the same `@triton.jit` kernels, run in this process), and
against numpy written to the rules where the interpreter has no defined answer (an all-NaN
argmax, float -> int conversion of NaN and out-of-range values, bf16).

The default tier runs a sample of the dtypes on each target; TILEJIT_RUN_SLOW=1 runs them all."""
import itertools

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from compiler import kernel, numerics, use_target  # noqa: E402
from compiler.errors import KernelArgumentError  # noqa: E402

pytestmark = pytest.mark.compile

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]
SAMPLE_INT = ["int8", "uint32", "int64", "bool"]
TARGETS = [pytest.param("cpu"), pytest.param("gpu:interpret"),
           pytest.param("kunlun:xpu3", marks=pytest.mark.emulation)]
N_INT_OPS = 17


@triton.jit
def int_ops(X, Y, Z, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    y = tl.load(Y + offs)
    tl.store(Z + 0 * N + offs, x + y)
    tl.store(Z + 1 * N + offs, x - y)
    tl.store(Z + 2 * N + offs, x * y)
    tl.store(Z + 3 * N + offs, x // y)
    tl.store(Z + 4 * N + offs, x % y)
    tl.store(Z + 5 * N + offs, x << y)
    tl.store(Z + 6 * N + offs, x >> y)
    tl.store(Z + 7 * N + offs, -x)
    tl.store(Z + 8 * N + offs, tl.maximum(x, y))
    tl.store(Z + 9 * N + offs, tl.minimum(x, y))
    tl.store(Z + 10 * N + offs, x & y)
    tl.store(Z + 11 * N + offs, x | y)
    tl.store(Z + 12 * N + offs, x ^ y)
    tl.store(Z + 13 * N + offs, ~x)
    # the width an operation wraps at shows in what is computed from its result
    tl.store(Z + 14 * N + offs, (x + y) < x)
    tl.store(Z + 15 * N + offs, (x * y) == x)
    tl.store(Z + 16 * N + offs, (x - y) >> 1)


def _int_values(dt: str) -> np.ndarray:
    if dt == "bool":
        return np.array([False, True])
    info = np.iinfo(dt)
    bits = info.bits
    vals = {0, 1, 2, 3, 7, bits - 1, bits, bits + 1, info.max, info.max - 1, info.min, info.min + 1}
    if info.min < 0:
        vals |= {-1, -2, -7}
    return np.array(sorted(v for v in vals if info.min <= v <= info.max), dtype=dt)


def _pairs(vals: np.ndarray, n: int):
    xs, ys = zip(*itertools.product(vals, vals))
    xs, ys = np.array(xs, dtype=vals.dtype), np.array(ys, dtype=vals.dtype)
    reps = -(-n // len(xs))
    return np.tile(xs, reps)[:n], np.tile(ys, reps)[:n]


def triton_interpret(jit_fn, grid, *args, **kwargs):
    """Runs a `@triton.jit` kernel through Triton's interpreter, in this process."""
    from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415
    from targets.gpu.launcher import interpreting  # noqa: PLC0415
    with interpreting(), np.errstate(all="ignore"):
        InterpretedFunction(jit_fn.fn)[grid](*args, **kwargs)


def _run_int(target, dt, x, y, n):
    tdt = getattr(torch, dt)
    X, Y = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    Z = torch.zeros(N_INT_OPS * n, dtype=tdt)
    if target == "triton":
        triton_interpret(int_ops, (1,), X, Y, Z, N=n)
    else:
        with use_target(target):
            kernel(int_ops)[(1,)](X, Y, Z, N=n)
    return Z.view(N_INT_OPS, n)


INT_OP_NAMES = ["+", "-", "*", "//", "%", "<<", ">>", "neg", "maximum", "minimum", "&", "|", "^", "~",
                "(x+y)<x", "(x*y)==x", "(x-y)>>1"]


def _refuses_uint64(target, *dts) -> bool:
    """Kunlun has no uint64: a launch with one is refused, naming the argument and the int64 fix."""
    if target != "kunlun:xpu3" or "uint64" not in dts:
        return False
    with use_target(target), pytest.raises(KernelArgumentError, match=r"argument '\w+' is a uint64 tensor.*torch.int64"):
        kernel(int_ops)[(1,)](*(torch.zeros(16, dtype=getattr(torch, d)) for d in (dts * 2)[:2]),
                              torch.zeros(16 * N_INT_OPS, dtype=torch.uint64), N=16)
    return True


def _check_int(target, dt):
    if _refuses_uint64(target, dt):
        return
    vals = _int_values(dt)
    n = 1 << max(4, (len(vals) ** 2 - 1).bit_length())
    x, y = _pairs(vals, n)
    ref = _run_int("triton", dt, x, y, n)
    got = _run_int(target, dt, x, y, n)
    for k, name in enumerate(INT_OP_NAMES):
        bad = (ref[k] != got[k]).nonzero().flatten().tolist()
        assert not bad, (f"{target} {dt} `{name}`: x={x[bad[0]]!r} y={y[bad[0]]!r} gives {got[k][bad[0]].item()}, "
                         f"Triton's interpreter {ref[k][bad[0]].item()} ({len(bad)} elements differ)")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", SAMPLE_INT)
def test_integer_rules_match_triton(target, dt):
    _check_int(target, dt)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", [d for d in INT_DTYPES if d not in SAMPLE_INT])
def test_integer_rules_match_triton_all_dtypes(target, dt):
    _check_int(target, dt)


@triton.jit
def mixed_ops(X, Y, Z, ZB, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    y = tl.load(Y + offs)
    tl.store(Z + 0 * N + offs, x + y)
    tl.store(Z + 1 * N + offs, x * y)
    tl.store(Z + 2 * N + offs, x >> y)   # arithmetic when x's own type is signed, on the promoted bits
    tl.store(Z + 3 * N + offs, x << y)
    tl.store(Z + 4 * N + offs, tl.maximum(x, y))
    tl.store(ZB + 0 * N + offs, x < y)
    tl.store(ZB + 1 * N + offs, x == y)


# (x's dtype, y's dtype, the promoted dtype Triton computes in)
MIXED = [("int8", "uint8", "uint8"), ("uint8", "int8", "uint8"), ("int32", "uint32", "uint32"),
         ("int64", "uint64", "uint64"), ("uint16", "int32", "int32"), ("int8", "int32", "int32"),
         ("uint32", "uint8", "uint32"), ("int16", "uint64", "uint64")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xd,yd,zd", MIXED)
@pytest.mark.sampled
def test_mixed_integer_types_match_triton(target, xd, yd, zd):
    if _refuses_uint64(target, xd, yd):
        return
    xv, yv = _int_values(xd), _int_values(yd)
    n = 1 << max(4, (len(xv) * len(yv) - 1).bit_length())
    pairs = list(itertools.product(xv.tolist(), yv.tolist()))
    reps = -(-n // len(pairs))
    x = np.array([p[0] for p in pairs] * reps, dtype=xd)[:n]
    y = np.array([p[1] for p in pairs] * reps, dtype=yd)[:n]
    outs = {}
    for who in ("triton", target):
        X, Y = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        Z, ZB = torch.zeros(5 * n, dtype=getattr(torch, zd)), torch.zeros(2 * n, dtype=torch.bool)
        if who == "triton":
            triton_interpret(mixed_ops, (1,), X, Y, Z, ZB, N=n)
        else:
            with use_target(who):
                kernel(mixed_ops)[(1,)](X, Y, Z, ZB, N=n)
        outs[who] = (Z.view(5, n), ZB.view(2, n))
    for k, name in enumerate(["+", "*", ">>", "<<", "maximum"]):
        ref, got = outs["triton"][0][k], outs[target][0][k]
        bad = (ref != got).nonzero().flatten().tolist()
        assert not bad, (f"{target} {xd} {name} {yd}: x={x[bad[0]]} y={y[bad[0]]} gives {got[bad[0]]}, "
                         f"Triton {ref[bad[0]]}")
    assert torch.equal(outs["triton"][1], outs[target][1])


def test_int1_wraps_as_triton():
    """The issue's case, spelled out: True + True is False, True - True is False, -True is True."""
    x = torch.tensor([False, False, True, True])
    y = torch.tensor([False, True, False, True])
    z = _run_int("cpu", "bool", x.numpy(), y.numpy(), 4)
    assert z[0].tolist() == [False, True, True, False]
    assert z[1].tolist() == [False, True, True, False]
    assert z[7].tolist() == [False, False, True, True]


# -- NaN: elementwise max/min, reductions, arg-reductions --------------------------------------------
R, C = 16, 8
NAN, INF = float("nan"), float("inf")
ROWS = [
    [NAN, 6, 8, 1, 2, 3, 4, 5],              # NaN first (the case)
    [3, 5, NAN, 1, 0, 2, 4, 1],              # NaN in the middle
    [1, 2, 3, 4, 5, 6, 7, NAN],              # NaN last
    [NAN, -INF, NAN, NAN, NAN, NAN, NAN, NAN],   # one non-NaN: -inf
    [NAN, NAN, NAN, NAN, NAN, NAN, NAN, INF],
    [2, 7, 7, 1, 7, -3, -3, 0],              # ties: the lowest index
    [-1, -1, -1, -1, -1, -1, -1, -1],
    [0.5, -2.5, INF, -INF, NAN, 1e30, -1e30, 0.25],
    [1, NAN, 1, NAN, 1, NAN, 1, NAN],
    [-4, -3, -2, -1, -4, -3, -2, -1],
    [5, 4, 3, 2, 1, 0, -1, -2],
    [NAN, 0.125, NAN, -0.125, NAN, 8, NAN, -8],
    [9, 9, 9, 9, 9, 9, 9, 9],
    [1e-3, 1e-4, 1e-5, 1e-6, -1e-6, -1e-5, -1e-4, -1e-3],
    [INF, NAN, INF, 0, -INF, NAN, -INF, 0],
    [3, 1, 4, 1, 5, 9, 2, 6],
]
ALL_NAN_ROW = [NAN] * C


@triton.jit
def nan_ops(X, Y, Z, ZR, ZI, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)[:, None]
    cols = tl.arange(0, C)[None, :]
    at = rows * C + cols
    x = tl.load(X + at)
    y = tl.load(Y + at)
    n = R * C
    tl.store(Z + 0 * n + at, tl.maximum(x, y))
    tl.store(Z + 1 * n + at, tl.minimum(x, y))
    tl.store(Z + 2 * n + at, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(Z + 3 * n + at, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(Z + 4 * n + at, tl.clamp(x, -1.0, 1.0))
    tl.store(Z + 5 * n + at, tl.clamp(x, -1.0, 1.0, propagate_nan=tl.PropagateNan.ALL))
    r = tl.arange(0, R)
    tl.store(ZR + 0 * R + r, tl.max(x, axis=1))
    tl.store(ZR + 1 * R + r, tl.min(x, axis=1))
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(ZR + 2 * R + r, v)
    tl.store(ZI + 0 * R + r, i)
    tl.store(ZI + 1 * R + r, tl.argmax(x, axis=1))
    tl.store(ZI + 2 * R + r, tl.argmin(x, axis=1))
    tl.store(ZI + 3 * R + r, tl.argmax(x, axis=1, tie_break_left=False))


def _run_nan(target, dtype, rows, policy="fast"):
    x = torch.tensor(rows, dtype=torch.float32).to(dtype)
    y = torch.roll(x, 3, dims=1).flip(0)
    Z = torch.zeros(6, R, C, dtype=dtype)
    ZR = torch.zeros(3, R, dtype=dtype)
    ZI = torch.zeros(4, R, dtype=torch.int32)
    if target == "triton":
        triton_interpret(nan_ops, (1,), x, y, Z, ZR, ZI, R=R, C=C)
    else:
        with use_target(target), numerics(policy):
            kernel(nan_ops)[(1,)](x, y, Z, ZR, ZI, R=R, C=C)
    return x, y, Z, ZR, ZI


def _same(a, b):
    """Equal values, NaN equal to NaN (+0.0 equal to -0.0: reductions leave a zero's sign open)."""
    a, b = a.float(), b.float()
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _same_bits(a, b):
    """Bit for bit, any NaN equal to any NaN (-0.0 and +0.0 differ)."""
    ints = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
    return bool(((a.view(ints) == b.view(ints)) | (a.isnan() & b.isnan())).all())


def _rule_reference(x):
    """numpy written to compiler/value_rules.py: elementwise ops of x and y, reductions of x's rows."""
    xn = x.float().numpy()
    yn = torch.roll(x, 3, dims=1).flip(0).float().numpy()
    with np.errstate(all="ignore"):
        ew = [np.fmax(xn, yn), np.fmin(xn, yn), np.maximum(xn, yn), np.minimum(xn, yn),
              np.fmin(np.fmax(xn, -1.0), 1.0), np.clip(xn, -1.0, 1.0)]
        all_nan = np.isnan(xn).all(axis=1)
        # the first index of the extreme among the non-NaN elements (numpy's nanargmax would take a
        # NaN's index where that extreme is -inf)
        hi = np.where(np.isnan(xn), -np.inf, xn).max(axis=1, keepdims=True)
        lo = np.where(np.isnan(xn), np.inf, xn).min(axis=1, keepdims=True)
        am = np.where(all_nan, 0, np.argmax((xn == hi) & ~np.isnan(xn), axis=1))
        an = np.where(all_nan, 0, np.argmax((xn == lo) & ~np.isnan(xn), axis=1))
        red = [np.nanmax(xn, axis=1), np.nanmin(xn, axis=1)]
    return ew, red, am, an


NAN_CASES = [("cpu", "fast"), ("cpu", "strict"), ("gpu:interpret", "fast"), ("gpu:interpret", "strict"),
             pytest.param("kunlun:xpu3", "fast", marks=pytest.mark.emulation),
             pytest.param("kunlun:xpu3", "strict", marks=pytest.mark.emulation)]


@pytest.mark.parametrize("target,policy", NAN_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.sampled
def test_nan_rules_match_triton(target, policy, dtype):
    ref = _run_nan("triton", dtype, ROWS)
    got = _run_nan(target, dtype, ROWS, policy)
    _, _, Zr, ZRr, ZIr = ref
    _, _, Z, ZR, ZI = got
    names = ["maximum", "minimum", "maximum ALL", "minimum ALL", "clamp", "clamp ALL"]
    for k, name in enumerate(names):   # elementwise: bit for bit (ties give the second operand)
        assert _same_bits(Z[k], Zr[k]), f"{target} {policy} {dtype} {name}:\n{Z[k]}\nTriton:\n{Zr[k]}"
    for k, name in enumerate(["max", "min", "max(return_indices) value"]):
        assert _same(ZR[k], ZRr[k]), f"{target} {policy} {dtype} tl.{name}: {ZR[k]} vs Triton {ZRr[k]}"
    # Triton's interpreter (numpy's nanargmax) counts NaN as -inf (+inf for argmin), so where the
    # extreme of the other elements is that infinity it may answer a NaN's index; the rule ignores
    # NaN there too (test_nan_rules_all_nan_and_bf16 checks those rows)
    xf = ref[0].float()
    has_nan = xf.isnan().any(dim=1)
    open_max = has_nan & (torch.where(xf.isnan(), -INF, xf).amax(dim=1) == -INF)
    open_min = has_nan & (torch.where(xf.isnan(), INF, xf).amin(dim=1) == INF)
    for k, name in enumerate(["max(return_indices) index", "argmax", "argmin", "argmax(tie_break_left=False)"]):
        keep = ~(open_min if name == "argmin" else open_max)
        assert torch.equal(ZI[k][keep], ZIr[k][keep]), f"{target} {policy} {dtype} {name}: {ZI[k]} vs Triton {ZIr[k]}"


@pytest.mark.parametrize("target,policy", NAN_CASES)
def test_nan_rules_all_nan_and_bf16(target, policy):
    """Where Triton's interpreter has no answer (an all-NaN argmax raises there) or no dtype (bf16):
    numpy written to the rules."""
    rows = [ALL_NAN_ROW] + ROWS[1:]
    for dtype in (torch.float32, torch.bfloat16):
        x, y, Z, ZR, ZI = _run_nan(target, dtype, rows, policy)
        ew, red, am, an = _rule_reference(x)
        for k in range(6):
            assert _same_bits(Z[k], torch.from_numpy(ew[k]).to(dtype)), (target, policy, dtype, k, Z[k])
        assert _same(ZR[0], torch.from_numpy(red[0]).to(dtype)) and _same(ZR[1], torch.from_numpy(red[1]).to(dtype))
        assert ZI[0].tolist() == ZI[1].tolist() == ZI[3].tolist() == am.tolist(), (ZI, am)
        assert ZI[2].tolist() == an.tolist(), (ZI[2], an)
        assert ZI[1][0] == 0 and ZR[2][0].isnan()   # all-NaN: index 0, value NaN


@triton.jit
def to_int(X, Z, ZU, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(Z + offs, x.to(tl.int32))
    tl.store(ZU + offs, x.to(tl.uint8))


@pytest.mark.parametrize("target", TARGETS)
def test_float_to_int_conversion(target):
    """In range: truncation toward zero, as Triton's interpreter; NaN -> 0 and saturation outside
    (the interpreter's numpy cast is undefined there)."""
    vals = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.9999, -2.9999, 255.7, 100.0, -100.0, 3e9, -3e9, NAN, INF, -INF]
    x = torch.tensor(vals, dtype=torch.float32)
    z, zu = torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.uint8)
    with use_target(target):
        kernel(to_int)[(1,)](x, z, zu, N=16)
    zr, zur = torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.uint8)
    triton_interpret(to_int, (1,), x, zr, zur, N=16)
    assert z[:11].tolist() == zr[:11].tolist()
    assert z[11:].tolist() == [2 ** 31 - 1, -(2 ** 31), 0, 2 ** 31 - 1, -(2 ** 31)]
    assert zu.tolist() == [0, 0, 0, 0, 1, 0, 2, 0, 255, 100, 0, 255, 0, 0, 255, 0]
