"""The Kunlun XPU C++ dialect: the C-family table with the chip's types and memory spaces
(`__global_ptr__` GM pointers, `__simd__ __local__` LM buffers, 32-bit integers and pointers)."""
from __future__ import annotations

import math

from compiler import dtypes as D
from compiler.errors import CompilationError
from targets.cfamily.dialect import CDialect


class KunlunDialect(CDialect):
    # int64 values the memory plan could not narrow to int32 (plan/narrow.py) are two 32-bit halves;
    # no uint64 (the halves are signed arithmetic)
    reg_types = {**{k: v for k, v in CDialect.reg_types.items() if k is not D.uint64}, D.int64: "tj_i64"}
    mem_types = {**{k: v for k, v in CDialect.mem_types.items() if k is not D.uint64}, D.int64: "tj_i64",
                 D.float64: "tj_f64"}   # fp64 memory, read and written by compiler/fp64.py's words
    missing_dtype_hint = (" (kunlun has no 64-bit unsigned integer: compute in tl.int64, which gives the same "
                          "bits for +, -, *, &, |, ^ and <<)")
    ctype_bytes = {**CDialect.ctype_bytes, "tj_i64": 8, "tj_f64": 8}
    pointer_bytes = 4   # device pointers are 4 bytes
    # a tile of pointers in LM stays at 8 bytes an element: the host emulation's pointers are 8
    # bytes, and one placement serves the device and the emulation
    local_pointer_bytes = 8
    dot_microkernel = None   # plain fma loops, ascending k (the SIMD dot is codegen/simd.py's)
    # Device math: the overloaded names public device code calls (`exp`, `sqrt`, `log`, `fabs`, ...
    # on floats, from xtdk_math.h) and clang's `__builtin_*f`, which builds under `-fno-builtin` and
    # lowers to LLVM intrinsics; never the C99 `expf`/`fmaf` libm names (no device libm has them).
    # `__builtin_fmaf` is LLVM's fma intrinsic: one rounding by definition, which strict relies on
    # (`fma` itself is x*y+z in one public XPU libdevice). docs/kunlun.md, "Device math".
    float_math = {"exp": "exp({0})", "exp2": "exp2({0})", "log": "log({0})", "log2": "log2({0})",
                  "sqrt": "sqrt({0})", "rsqrt": "(1.0f / sqrt({0}))", "sigmoid": "(1.0f / (1.0f + exp(-{0})))",
                  "sin": "sin({0})", "cos": "cos({0})", "floor": "__builtin_floorf({0})",
                  "ceil": "__builtin_ceilf({0})", "abs": "__builtin_fabsf({0})",
                  "fma": "__builtin_fmaf({0}, {1}, {2})", "mod": "fmod({0}, {1})", "tanh": "tanh({0})",
                  "erf": "erf({0})", "log1p": "log1p({0})", "expm1": "expm1({0})",
                  "trunc": "__builtin_truncf({0})", "rint": "__builtin_rintf({0})", "pow": "pow({0}, {1})"}
    simd_pragma = None   # no OpenMP in device code (an unknown pragma is an error under -Werror)
    affine_mask_dtypes = (D.int32,)   # int64 stays two halves (tj_i64): masks over it check each element

    def simd_reduction_pragma(self, kind: str, dt: D.dtype, var: str = "acc") -> str | None:
        return None

    def reg_type(self, dt: D.dtype) -> str:
        if dt.is_ptr():
            return f"__global_ptr__ {self.mem_type(dt.element_ty)}*"
        if dt is D.float64:   # compiler/fp64.py leaves none: a compiler bug if one gets here
            raise CompilationError("internal: an fp64 value reached the kunlun renderer")
        return super().reg_type(dt)

    def literal(self, value, dt: D.dtype) -> str:
        if dt.is_floating() and not math.isfinite(float(value)):
            # builtins, not <math.h>'s INFINITY/NAN: device code includes no host math header
            v = float(value)
            return "__builtin_nanf(\"\")" if math.isnan(v) else "__builtin_inff()" if v > 0 else "(-__builtin_inff())"
        if dt is D.int64:
            v = int(value) % 2 ** 64
            hi = (v >> 32) - (2 ** 32 if v >> 63 else 0)
            return f"tj_mk64({v & 0xffffffff:#x}u, {super().literal(hi, D.int32)})"
        return super().literal(value, dt)

    def cast(self, x: str, src: D.dtype, dst: D.dtype) -> str:
        if src is D.int64 and dst is not D.int64:
            if dst.is_bool():
                return f"tj_nz64({x})"
            if dst.is_floating():
                return self._round(f"tj_i64_to_f({x})", dst)
            return f"({self.reg_type(dst)})tj_lo32({x})"
        if dst is D.int64 and src is not D.int64:
            return f"tj_f_to_i64({x})" if src.is_floating() else f"tj_i64((int32_t)({x}))"
        return super().cast(x, src, dst)

    def mem_type(self, dt: D.dtype) -> str:
        try:
            return self.mem_types[dt]
        except KeyError:
            raise CompilationError(f"dtype {dt} is not supported in Kunlun global memory") from None

    def local_buffer_decl(self, ctype: str, name: str, numel: int) -> str:
        # `;`-joined: the lowering appends the final `;`
        return f"__simd__ __local__ {ctype} {name}[{numel}]; TJ_LM_USE({name})"

    def copy_buffer(self, dst: str, src: str, numel: int, ctype: str) -> str:
        return f"for (int j = 0; j < {numel}; ++j) {dst}[j] = {src}[j]"

    def print_element(self, label, idx, value, dt, hexa) -> str:
        return f"(void)({value});   // tl.device_print: the kunlun target does not print"

    def load_elem(self, dt, ptr):   # compute never dereferences GM: loads go through GM2LM
        raise CompilationError("internal: kunlun lowering tried to dereference a global pointer")

    def store_elem(self, dt, ptr, val):
        raise CompilationError("internal: kunlun lowering tried to store through a global pointer")

    # GM -> LM element conversion (memory representation -> register representation; to_mem: the base's)
    @staticmethod
    def from_mem(dt: D.dtype, x: str) -> str:
        return {D.float16: f"tj_h2f({x})", D.bfloat16: f"tj_bf2f({x})", D.int1: f"({x} != 0)"}.get(dt, x)

    def elem_bytes(self, dt: D.dtype) -> int:
        """Bytes of one element in global memory."""
        return self.ctype_bytes[self.mem_type(dt)]

    dma_suffix = {D.float16: "f16", D.bfloat16: "bf16"}   # tilejit_xpu.h's widening/narrowing copies

    def same_repr(self, dt: D.dtype) -> bool:
        return self.reg_types[dt] == self.mem_types[dt]
