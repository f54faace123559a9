"""`triton.language.math` and the libdevice modules, by name, onto tilejit's builtins.

Each name a real kernel may import from these modules resolves, when it is looked up, to the
tile-language builtin of that name (or of its plain equivalent: `fast_expf` is `exp`, `sqrt_rn` is
`sqrt`), so a kernel body's `libdevice.rsqrt(x)` is `tl.rsqrt(x)`. A name tilejit has no builtin
for yet still exists, so that `from triton.language.extra.libdevice import erfinv` imports; a kernel
that calls it fails to compile with a CompilationError at the call saying it is not supported yet.
Names that are not Triton's are an AttributeError (an ImportError for `from ... import`).
"""
from __future__ import annotations

import functools

from compiler import language as _tl

# The functions of triton.language.math and of libdevice (names only).
LIBDEVICE = frozenset("""
abs acos acosh add_rd add_rn add_ru add_rz asin asinh atan atan2 atanh brev byte_perm cbrt ceil clz copysign
cos cosh cospi cyl_bessel_i0 cyl_bessel_i1 div_rd div_rn div_ru div_rz double2float_rd double2float_rn
double2float_ru double2float_rz double2hiint double2int_rd double2int_rn double2int_ru double2int_rz
double2ll_rd double2ll_rn double2ll_ru double2ll_rz double2loint double2uint_rd double2uint_rn double2uint_ru
double2uint_rz double2ull_rd double2ull_rn double2ull_ru double2ull_rz double_as_longlong erf erfc erfcinv
erfcx erfinv exp exp10 exp2 expm1 fast_cosf fast_dividef fast_exp10f fast_expf fast_log10f fast_log2f
fast_logf fast_powf fast_sinf fast_tanf fast_tanhf fdim ffs finitef float2int_rd float2int_rn float2int_ru
float2int_rz float2ll_rd float2ll_rn float2ll_ru float2ll_rz float2uint_rd float2uint_rn float2uint_ru
float2uint_rz float2ull_rd float2ull_rn float2ull_ru float2ull_rz float_as_int float_as_uint floor fma fma_rd
fma_rn fma_ru fma_rz fmod hadd hiloint2double hypot ilogb int2double_rn int2float_rd int2float_rn
int2float_ru int2float_rz int_as_float isfinited isinf isnan j0 j1 jn ldexp lgamma ll2double_rd ll2double_rn
ll2double_ru ll2double_rz ll2float_rd ll2float_rn ll2float_ru ll2float_rz llrint llround log log10 log1p
log2 logb longlong_as_double mul24 mul_rd mul_rn mul_ru mul_rz mulhi nearbyint nextafter norm3d norm4d
normcdf normcdfinv popc pow rcbrt rcp64h rcp_rd rcp_rn rcp_ru rcp_rz remainder rhadd rhypot rint rnorm3d
rnorm4d round rsqrt rsqrt_rn sad saturatef scalbn signbit sin sinh sinpi sqrt sqrt_rd sqrt_rn sqrt_ru
sqrt_rz sub_rd sub_rn sub_ru sub_rz tan tanh tgamma trunc uint2double_rn uint2float_rd uint2float_rn
uint2float_ru uint2float_rz uint_as_float ull2double_rd ull2double_rn ull2double_ru ull2double_rz
ull2float_rd ull2float_rn ull2float_ru ull2float_rz y0 y1 yn
""".split())
# triton.language.math also has these (and, in Triton 2.x, every libdevice name)
MATH = LIBDEVICE | frozenset("fdiv umulhi sigmoid softmax cdiv max min maximum minimum".split())
# a libdevice name -> the builtin with the same meaning (the fast_* variants are approximations
# on CUDA; here they are the accurate function, which is within their error bound)
ALIASES = {
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_log10f": "log10",
    "fast_exp10f": "exp10", "fast_sinf": "sin", "fast_cosf": "cos", "fast_tanf": "tan", "fast_tanhf": "tanh",
    "fast_powf": "pow", "fast_dividef": "fdiv", "sqrt_rn": "sqrt", "rsqrt_rn": "rsqrt", "fma_rn": "fma",
    "div_rn": "fdiv", "isfinited": "isfinite", "finitef": "isfinite",
}


def _builtin(name):
    for ns in (_tl, getattr(_tl, "math", None)):
        f = getattr(ns, name, None) if ns is not None else None
        if f is not None and (getattr(f, "__tilejit_builtin__", None) or getattr(f, "is_tilejit_kernel", False)):
            return f
    return None


@functools.lru_cache(maxsize=None)
def unsupported(qualname: str, instead: str | None = None):
    """A placeholder for a Triton function tilejit has no builtin for: importable, refused (with
    a CompilationError at the call, saying `instead` or listing the math functions) when a kernel
    calls it."""
    msg = (f"{qualname} is not supported by tilejit's tile language: {instead}" if instead else
           f"{qualname} is not supported yet by tilejit's tile language; the math functions it has are "
           f"tl.exp, tl.exp2, tl.log, tl.log2, tl.sqrt, tl.rsqrt, tl.sigmoid, tl.sin, tl.cos, tl.abs, "
           f"tl.floor, tl.ceil, tl.fma and the others in docs/triton.md")

    def placeholder(*args, **kwargs):
        raise RuntimeError(msg)

    placeholder.__name__ = placeholder.__qualname__ = qualname.rsplit(".", 1)[-1]
    placeholder.__tilejit_unsupported__ = msg
    return placeholder


def lookup(module: str, name: str, names=LIBDEVICE):
    """The object `module.name` stands for (see the module docstring); AttributeError otherwise."""
    if name.startswith("__"):
        raise AttributeError(name)
    f = _builtin(ALIASES.get(name, name)) or _builtin(name)
    if f is not None:
        return f
    if name in names:
        return unsupported(f"{module}.{name}")
    raise AttributeError(f"module '{module}' has no attribute '{name}'")
