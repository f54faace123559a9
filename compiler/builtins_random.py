"""Random numbers: Philox 4x32 (10 rounds by default) built from int32 operations and umulhi,
with the constants, key schedule, counter layout and float conversions of Triton's
`triton.language.random`, so a seed and an offset give the same bits as Triton (uint32 words, as
its randint returns them). The rounds run on int32 values (the same bits: integer arithmetic
wraps modulo 2**32 on every target, which is what Philox needs)."""
from __future__ import annotations

from . import dtypes as D
from .builtins_common import _const_int
from .semantic import SemanticError, Tile

_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_SCALE32 = 4.6566127342e-10        # the largest value with (2**31 - 1) * scale < 1 in fp32
_SCALE64 = 1.0842020432385337e-19


def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _key(b, seed):
    """(k0, k1): the low and high 32 bits of the seed read as a 64-bit integer (an int32 seed is
    sign-extended, as Triton's seed.to(tl.uint64))."""
    if not isinstance(seed, Tile):
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SemanticError(f"a random seed must be an integer, got {seed!r}")
        return _i32(seed), _i32(seed >> 32)
    if seed.shape or not seed.dtype.is_int() or seed.dtype.is_bool():
        raise SemanticError(f"a random seed must be an integer scalar, got a {seed.type} value")
    if seed.dtype.bits == 64:
        return b.cast(seed, D.int32), b.cast(b.binary("shr", seed, 32), D.int32)
    seed = b.cast(seed, D.int32)
    return seed, b.binary("shr", seed, 31)


def _add32(b, k, c):
    return _i32(k + c) if not isinstance(k, Tile) else b.binary("add", k, _i32(c))


def philox_rounds(b, seed, c0, c1, c2, c3, n_rounds):
    n_rounds = _const_int("philox", "n_rounds", n_rounds)
    k0, k1 = _key(b, seed)
    ra, rb = _i32(_ROUND_A), _i32(_ROUND_B)
    c = b.broadcast_all(*(b.cast(b.to_tile(x), D.int32) for x in (c0, c1, c2, c3)))
    c0, c1, c2, c3 = c
    for _ in range(n_rounds):
        _c0, _c2 = c0, c2
        c0 = b.binary("xor", b.binary("xor", b.op1("umulhi", [b.broadcast_to(b.const(rb, D.int32), _c2.shape), _c2]),
                                      c1), k0)
        c2 = b.binary("xor", b.binary("xor", b.op1("umulhi", [b.broadcast_to(b.const(ra, D.int32), _c0.shape), _c0]),
                                      c3), k1)
        c1 = b.binary("mul", _c2, rb)
        c3 = b.binary("mul", _c0, ra)
        k0, k1 = _add32(b, k0, _KEY_A), _add32(b, k1, _KEY_B)
    return tuple(b.bitcast(x, D.uint32) for x in (c0, c1, c2, c3))


def _counters(b, offset):
    """(lo, hi) 32-bit words of the offsets (hi is 0 for 32-bit offsets)."""
    offset = b.to_tile(offset)
    if not offset.dtype.is_int() or offset.dtype.is_bool():
        raise SemanticError(f"random offsets must be integers, got {offset.dtype}")
    if offset.dtype.bits == 64:
        return b.cast(offset, D.int32), b.cast(b.binary("shr", offset, 32), D.int32)
    lo = b.cast(offset, D.int32)
    return lo, b.broadcast_to(b.const(0, D.int32), lo.shape)


def randint4x(b, seed, offset, n_rounds):
    lo, hi = _counters(b, offset)
    zero = b.broadcast_to(b.const(0, D.int32), lo.shape)
    return philox_rounds(b, seed, lo, hi, zero, zero, n_rounds)


def uniform(b, x):
    x = b.to_tile(x)
    if not x.dtype.is_int() or x.dtype.bits not in (32, 64):
        raise SemanticError(f"tl.uint_to_uniform_float needs 32- or 64-bit integers, got {x.dtype}")
    x = b.bitcast(x, D.int32 if x.dtype.bits == 32 else D.int64)
    x = b.where(b.binary("lt", x, 0), b.unary("not", x), x)
    return b.binary("mul", x, _SCALE32 if x.dtype.bits == 32 else _SCALE64)


def normal_pair(b, u1, u2):
    u1 = b.binary("max", 1.0e-7, u1)
    th = b.binary("mul", 6.283185307179586, u2)
    r = b.unary("sqrt", b.binary("mul", -2.0, b.unary("log", u1)))
    return b.binary("mul", r, b.unary("cos", th)), b.binary("mul", r, b.unary("sin", th))


def _randn4x(b, n, a):
    i = randint4x(b, a["seed"], a["offset"], a["n_rounds"])
    u = [uniform(b, x) for x in i]
    return normal_pair(b, u[0], u[1]) + normal_pair(b, u[2], u[3])


HANDLERS = {
    "randint4x": lambda b, n, a: randint4x(b, a["seed"], a["offset"], a["n_rounds"]),
    "randint": lambda b, n, a: randint4x(b, a["seed"], a["offset"], a["n_rounds"])[0],
    "rand": lambda b, n, a: uniform(b, randint4x(b, a["seed"], a["offset"], a["n_rounds"])[0]),
    "rand4x": lambda b, n, a: tuple(uniform(b, x) for x in randint4x(b, a["seed"], a["offsets"], a["n_rounds"])),
    "randn": lambda b, n, a: _randn4x(b, n, a)[0],
    "randn4x": _randn4x,
    "philox": lambda b, n, a: philox_rounds(b, a["seed"], a["c0"], a["c1"], a["c2"], a["c3"], a["n_rounds"]),
    "uint_to_uniform_float": lambda b, n, a: uniform(b, a["x"]),
    "pair_uniform_to_normal": lambda b, n, a: normal_pair(b, a["u1"], a["u2"]),
}
