"""fp8 storage types: every conversion as a sequence of integer and exact float operations.

A float8e5 (e5m2) or float8e4nv (e4m3fn) value is its 8 bits everywhere (the C targets keep it
in a uint8_t register); only `bitcast` moves it to and from int8. So every target computes the
same bits, in both numerics policies:

- to fp32 (exact): e5m2 is the high byte of an fp16, widened; e4m3fn's fields are placed in an
  fp32's (subnormals: mantissa * 2**-9), s.1111.111 is NaN.
- from fp32, round to nearest even (torch's conversions): normal range by adding the rounding
  bias to the fp32 bits and shifting, subnormal range by rounding |x| * 2**k to an integer
  (2**23 added and subtracted); e5m2 overflows to inf, e4m3fn saturates to +-448; NaN stays NaN.
Other dtypes convert through fp32, which is exact in both directions for every value fp8 holds.
"""
from __future__ import annotations

import torch

from . import dtypes as D

# per format: (torch dtype, mantissa bits, exponent bias difference to fp32, smallest normal,
#              largest code, 2**(mantissa bits - exponent bias + 1): the subnormal scale)
_FORMATS = {
    D.float8e5: (torch.float8_e5m2, 2, 112, 2.0 ** -14, 124, 65536.0),
    D.float8e4nv: (torch.float8_e4m3fn, 3, 120, 2.0 ** -6, 126, 512.0),
}


def const_bits(value, dt: D.dtype) -> int:
    """The int8 bit pattern of `value` in fp8 format `dt` (compile-time constants)."""
    return int(torch.tensor([float(value)]).to(_FORMATS[dt][0]).view(torch.int8).item())


def convert(b, t, to: D.dtype):
    """`t` converted to `to` where one side is an fp8 format (b: the semantic Builder)."""
    src = t.dtype
    if src in D.FP8:
        t = _decode(b, t, src)
        return t if to is D.float32 else b.cast(t, to)
    if src is not D.float32:
        t = b.cast(t, D.float32)
    return _encode(b, t, to)


def _decode(b, t, fmt):
    bits = b.binary("and", b.cast(b.op1("bitcast", [t], {"to": D.int8}), D.int32), 0xFF)
    if fmt is D.float8e5:   # the high byte of an fp16
        h = b.cast(b.binary("shl", bits, 8), D.int16)
        return b.cast(b.op1("bitcast", [h], {"to": D.float16}), D.float32)
    sign = b.binary("shr", bits, 7)
    exp = b.binary("and", b.binary("shr", bits, 3), 15)
    man = b.binary("and", bits, 7)
    normal = b.binary("or", b.binary("or", b.binary("shl", sign, 31), b.binary("shl", b.binary("add", exp, 120), 23)),
                      b.binary("shl", man, 20))
    sub = b.binary("mul", b.cast(man, D.float32), 2.0 ** -9)
    sub = b.where(b.binary("ne", sign, 0), b.unary("neg", sub), sub)
    nan = b.binary("or", b.binary("shl", sign, 31), 0x7FC00000)
    out = b.where(b.binary("eq", b.binary("and", bits, 0x7F), 0x7F), nan, normal)
    out = b.op1("bitcast", [out], {"to": D.float32})
    return b.where(b.binary("eq", exp, 0), sub, out)


def _encode(b, x, fmt):
    _tdt, mbits, bias, min_normal, max_code, sub_scale = _FORMATS[fmt]
    u = b.op1("bitcast", [x], {"to": D.int32})
    sign = b.binary("and", b.binary("shr", u, 31), 1)
    a = b.binary("and", u, 0x7FFFFFFF)
    ax = b.op1("bitcast", [a], {"to": D.float32})
    drop = 23 - mbits
    lsb = b.binary("and", b.binary("shr", a, drop), 1)
    rounded = b.binary("shr", b.binary("add", b.binary("add", a, (1 << (drop - 1)) - 1), lsb), drop)
    normal = b.binary("min", b.binary("sub", rounded, bias << mbits), max_code)
    scaled = b.binary("mul", ax, sub_scale)
    sub = b.cast(b.binary("sub", b.binary("add", scaled, 8388608.0), 8388608.0), D.int32)
    code = b.where(b.binary("lt", ax, min_normal), sub, normal)
    code = b.where(b.binary("ne", ax, ax), 0x7F, code)
    byte = b.cast(b.binary("or", code, b.binary("shl", sign, 7)), D.int8)
    return b.op1("bitcast", [byte], {"to": fmt})
