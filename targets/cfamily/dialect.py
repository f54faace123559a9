"""The table a C-family target fills in: register and memory types, literals, op spellings,
math functions, loads/stores of one element, and a few pragmas. A target subclasses
`CDialect` and overrides entries; the loop-nest lowering itself is shared."""
from __future__ import annotations

import math
import re
from typing import NamedTuple

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Op
from compiler.ir.ops import ABS, ADD, AND, BITCAST, CAST, MOD, NEG, NOT, OR, ROUNDS, WHERE, XOR

_CPP_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "int", "long", "register", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "class", "new",
    "delete", "this", "template", "typename", "namespace", "operator", "private", "public", "protected",
    "virtual", "inline", "friend", "true", "false", "try", "catch", "throw", "using", "asm", "main",
}


class Bf16Dot(NamedTuple):
    """The header's bf16 dot and the helpers that lay out its raw operands (cfamily/bf16_dot.py)."""
    dot: str               # <M, N, K>(A rows, B pairs, float* C): C += A B
    pack_rows: str         # <R, C>(float tile, raw rows)
    pack_pairs: str        # <K, N>(float tile, raw pairs)
    fill_pairs: str        # <K, N>(raw pairs, row pointers): B straight from memory
    transposed_words: int  # the transposed fill's KIND that moves 32-bit words (B from column pointers)


class CDialect:
    # Register types: fp16/bf16 compute in float, rounded after each op (exact IEEE semantics,
    # since float has more than 2p+2 bits for p = 11 and 8).
    # fp8 values are their bits (compiler/fp8.py converts them with integer operations)
    reg_types = {D.float64: "double", D.float32: "float", D.float16: "float", D.bfloat16: "float",
                 D.int1: "bool", D.int8: "int8_t", D.int16: "int16_t", D.int32: "int32_t", D.int64: "int64_t",
                 D.float8e5: "uint8_t", D.float8e4nv: "uint8_t", D.uint8: "uint8_t", D.uint16: "uint16_t",
                 D.uint32: "uint32_t", D.uint64: "uint64_t"}
    mem_types = {D.float64: "double", D.float32: "float", D.float16: "uint16_t", D.bfloat16: "uint16_t",
                 D.int1: "uint8_t", D.int8: "int8_t", D.int16: "int16_t", D.int32: "int32_t", D.int64: "int64_t",
                 D.float8e5: "uint8_t", D.float8e4nv: "uint8_t", D.uint8: "uint8_t", D.uint16: "uint16_t",
                 D.uint32: "uint32_t", D.uint64: "uint64_t"}
    # bytes of each register/memory C type (local buffer sizes are counted with it)
    ctype_bytes = {"float": 4, "double": 8, "bool": 1, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2,
                   "int32_t": 4, "int64_t": 8, "uint32_t": 4, "uint64_t": 8}
    pointer_bytes = 8
    local_pointer_bytes = 8   # an element of a local tile of pointers (a loop-carried `ptrs += step`)
    simd_pragma = "#pragma omp simd"
    # (C vector type T of L floats, L): fast fp32 1-D sums as L partial sums (compute._reduce_in_lanes);
    # the header's T_add_half(T&, const float*, h) adds L / 2 floats to partials h * L / 2 onwards,
    # T_store(float*, const T&) writes the partials
    sum_vector: tuple[str, int] | None = None
    affine_mask_dtypes = (D.int32, D.int64)   # index types the header's tj_affine_cmp takes
    transposed_fill = None   # the header's fill of a tile from column pointers (None: element loops)
    rows_strided = None      # the header's check that row pointers are equally spaced (in_place.py)
    stride_ahead = None      # the header's stride predictor for a loop's next tile (prefetched by transposed_fill)
    bf16_dot: Bf16Dot | None = None   # the header's fast-policy dot of bf16 tiles, or None
    # the header's store(uint16_t* dst, const float* src, int n) of fp32 values rounded to bf16, for
    # a tile stored contiguously along its last axis a chunk at a time (None: element by element)
    bf16_store: str | None = None
    # int32 index sums widened to 64 bits where they become addresses (lowering._index64): a
    # host compiler built with -fwrapv cannot vectorise through a wrapping 32-bit sum
    widen_addresses = False
    # a fp16/bf16 -> fp32 widening used by up to three loop nests is evaluated again in each, as an
    # add is (materialize.py); False keeps it in an fp32 array (the cpu: the widening's shifts queue)
    recompute_widening = True
    # run-time loops: the C type of the trip count (None: the induction variable's type), and the
    # statement that reports a run-time step of 0 (None: such a loop runs 0 times), with {step}, {site}
    trip_count_type: str | None = None
    zero_step_check: str | None = None
    # register-blocked dot micro-kernel (a C++ template taking MR, NR), or None for plain loops
    dot_microkernel: str | None = None
    dot_nr = "tj_dot_nr({M}, {N})"   # the register block's width for an M x N dot (its height: tj_dot_mr)
    # op -> format over operand expressions; "{r}" wraps a result that needs rounding to fp16/bf16
    binary_ops = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
                  "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})",
                  "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
                  "eq": "({0} == {1})", "ne": "({0} != {1})",
                  "max": "tj_max({0}, {1})", "min": "tj_min({0}, {1})",
                  "floordiv": "tj_idiv({0}, {1})", "shl": "tj_shl({0}, {1})", "shr": "tj_shr({0}, {1})",
                  "umulhi": "tj_umulhi({0}, {1})"}
    float_math = {"exp": "expf({0})", "exp2": "exp2f({0})", "log": "logf({0})", "log2": "log2f({0})",
                  "sqrt": "sqrtf({0})", "rsqrt": "(1.0f / sqrtf({0}))", "sigmoid": "(1.0f / (1.0f + expf(-{0})))",
                  "sin": "sinf({0})", "cos": "cosf({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
                  "abs": "fabsf({0})", "fma": "fmaf({0}, {1}, {2})", "mod": "fmodf({0}, {1})",
                  "tanh": "tanhf({0})", "erf": "erff({0})", "log1p": "log1pf({0})", "expm1": "expm1f({0})",
                  "trunc": "truncf({0})", "rint": "rintf({0})", "pow": "powf({0}, {1})"}
    # the same functions of fp64 operands: the C library's double versions (expf -> exp)
    float_math_f64 = {k: re.sub(r"\b([a-z0-9]+)f\(", r"\1(", v).replace("1.0f", "1.0") for k, v in float_math.items()}
    # ops whose fp16/bf16 result must be rounded back to the narrow format
    rounding_ops = ROUNDS
    round_fn = {D.float16: "tj_round_fp16", D.bfloat16: "tj_round_bf16"}
    # elementwise ops spelled by a branch of `elementwise` rather than by a table entry
    special_elementwise = frozenset({"cast", "where", "bitcast", "neg", "not", "abs", "mod"})

    missing_dtype_hint = ""   # appended to the error for a dtype reg_types lacks

    def spells(self, op_name: str) -> bool:
        """Whether `elementwise` has a spelling for this elementwise op."""
        return op_name in self.binary_ops or op_name in self.float_math or op_name in self.special_elementwise

    def safe_name(self, name: str) -> str:
        return f"{name}_" if name in _CPP_KEYWORDS or name.startswith("tj_") else name

    def reg_type(self, dt: D.dtype) -> str:
        if dt.is_ptr():
            return self.mem_type(dt.element_ty) + "*"
        try:
            return self.reg_types[dt]
        except KeyError:
            raise CompilationError(f"dtype {dt} is not supported by this target{self.missing_dtype_hint}") from None

    def mem_type(self, dt: D.dtype) -> str:
        return self.mem_types[dt]

    def ctype_size(self, ctype: str) -> int:
        """Bytes of one element of C type `ctype` (a tile of pointers holds target pointers)."""
        return self.local_pointer_bytes if ctype.endswith("*") else self.ctype_bytes[ctype]

    def reg_size(self, dt: D.dtype) -> int:
        return self.pointer_bytes if dt.is_ptr() else self.ctype_bytes[self.reg_type(dt)]

    def local_buffer_decl(self, ctype: str, name: str, numel: int) -> str:
        return f"alignas(64) {ctype} {name}[{numel}]"

    def copy_buffer(self, dst: str, src: str, numel: int, ctype: str) -> str:
        return f"memcpy({dst}, {src}, sizeof({ctype}) * {numel})"

    def program_id(self, op_name: str, axis: int) -> str:
        return f"pid{axis}" if op_name == "program_id" else f"npg{axis}"

    def literal(self, value, dt: D.dtype) -> str:
        if dt.is_floating():
            v = float(value)
            if math.isnan(v):
                return "NAN"
            if math.isinf(v):
                return "INFINITY" if v > 0 else "(-INFINITY)"
            return repr(v) if dt is D.float64 else f"{v!r}f"
        if dt.is_bool():
            return "true" if value else "false"
        v = int(value)
        if dt.bits < 32:   # typed, so that a helper template (tj_idiv, tj_shl, ...) deduces one type
            return f"(({self.reg_type(dt)}){v})"
        if dt.is_unsigned():
            return f"UINT64_C({v})" if dt.bits == 64 else f"{v}u"
        if dt is D.int64:
            return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v - 1}) - 1)"
        if v == -(2 ** 31):
            return "(-2147483647 - 1)"
        return f"{v}" if v >= 0 else f"({v})"

    def _round(self, expr: str, dt: D.dtype) -> str:
        f = self.round_fn.get(dt)
        return f"{f}({expr})" if f else expr

    def elementwise(self, op: Op, args: list[str]) -> str:
        name = op.name
        dt = op.results[0].dtype
        src = op.operands[0].dtype if op.operands else dt
        if name == CAST:
            return self.cast(args[0], src, dt)
        if name == WHERE:
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name == BITCAST:
            return self.bitcast(args[0], src, dt)
        if name == NEG:
            return f"(-{args[0]})" if not dt.is_bool() else args[0]
        if name == NOT:
            return f"(!{args[0]})" if dt.is_bool() else f"(~{args[0]})"
        if name == ADD and dt.is_ptr():
            return f"({args[0]} + {args[1]})"
        if src.is_floating() and name in self.float_math:
            e = (self.float_math_f64 if src is D.float64 else self.float_math)[name].format(*args)
        elif name == ABS:
            e = f"tj_abs({args[0]})"
        elif name == MOD:
            e = f"tj_imod({args[0]}, {args[1]})"
        elif name in self.binary_ops:
            e = self.binary_ops[name].format(*args)
        else:
            raise CompilationError(f"op '{name}' has no C spelling for {dt}")
        if dt.is_bool() and name in (AND, OR, XOR):
            e = f"(bool){e}"
        if name in self.rounding_ops:
            e = self._round(e, dt)
        return e

    def cast(self, x: str, src: D.dtype, dst: D.dtype) -> str:
        if dst.is_bool():
            return f"({x} != 0)"
        if dst.is_floating():
            if src.is_floating():
                if src is D.float64 and dst in self.round_fn:
                    # fp64 -> fp16/bf16 in one rounding: fp32 rounded to odd keeps the sticky bit
                    return self._round(f"tj_f64_to_f32_odd({x})", dst)
                if src is D.float64 or dst is D.float64:
                    return f"({self.reg_type(dst)}){x}"   # fp64 -> fp32 rounds; widening is exact
                # narrowing rounds; widening fp16/bf16 -> fp32 is exact (already a float)
                if dst in self.round_fn and src is not dst:
                    return self._round(x, dst)
                return x
            if dst is D.float64:
                return f"(double){x}"
            return self._round(f"(float){x}", dst)
        if src.is_floating():
            return f"tj_f2i<{self.reg_type(dst)}>({x})"
        return f"({self.reg_type(dst)}){x}"

    def bitcast(self, x: str, src: D.dtype, dst: D.dtype) -> str:
        """Reinterprets bits: fp16/bf16 live as float in registers, so they go through their 16-bit
        patterns; fp8 registers already hold their bits."""
        narrow = {D.float16: ("tj_f2h", "tj_h2f"), D.bfloat16: ("tj_f2bf", "tj_bf2f")}
        if src in narrow:
            x, src = f"(int16_t){narrow[src][0]}({x})", D.int16
        elif src in D.FP8:
            x, src = f"(int8_t){x}", D.int8
        if dst in narrow:
            return f"{narrow[dst][1]}((uint16_t){x})"
        if dst in D.FP8:
            return f"(uint8_t){x}"
        if src is dst:
            return x
        return f"tj_bitcast<{self.reg_type(dst)}>({x})"

    # atomics: tj_atomic<kind, conversion>(ptr, val) / tj_atomic_cas<conversion>(ptr, cmp, val) of the
    # target's header; the conversion says how a register value maps to the memory format
    atomic_kinds = {"add": 0, "max": 1, "min": 2, "xchg": 3, "and": 4, "or": 5, "xor": 6}

    def atomic(self, kind: str, dt: D.dtype, ptr: str, args: list[str]) -> str:
        conv = {D.float16: 1, D.bfloat16: 2}.get(dt, 0)
        if kind == "cas":
            return f"tj_atomic_cas<{conv}>({ptr}, {', '.join(args)})"
        return f"tj_atomic<{self.atomic_kinds[kind]}, {conv}>({ptr}, {args[0]})"

    def print_element(self, label: str, idx, value: str, dt: D.dtype, hexa: bool) -> str:
        from .atomics import c_string  # noqa: PLC0415
        ids = ", ".join(["%d"] * len(idx)) if idx else ""
        if dt.is_floating():
            fmt, val = "%.9g", f"(double)({value})"
        elif dt.is_ptr():
            fmt, val = "%p", f"(const void*)({value})"
        elif dt.bits == 64:
            fmt, val = ("0x%llx", f"(unsigned long long)({value})") if hexa else (
                ("%llu", f"(unsigned long long)({value})") if dt.is_unsigned() else ("%lld", f"(long long)({value})"))
        elif dt.is_unsigned():
            fmt, val = ("0x%x" if hexa else "%u"), f"(unsigned)({value})"
        else:
            fmt, val = ("0x%x", f"(unsigned)({value})") if hexa else ("%d", f"(int)({value})")
        idx_args = "".join(f", (int){i}" for i in idx)
        return (f'printf("pid (%d, %d, %d) idx ({ids}) %s{fmt}\\n", pid0, pid1, pid2{idx_args}, '
                f"{c_string(label)}, {val});")

    def assert_fail(self, k: int, msg: str) -> str:
        from .atomics import c_string  # noqa: PLC0415
        return f"tj_assert_fail({k}, {c_string(msg)}, pid0, pid1, pid2)"

    def load_elem(self, dt: D.dtype, ptr: str) -> str:
        if dt is D.float16:
            return f"tj_h2f(*({ptr}))"
        if dt is D.bfloat16:
            return f"tj_bf2f(*({ptr}))"
        if dt is D.int1:
            return f"(*({ptr}) != 0)"
        return f"*({ptr})"

    def store_elem(self, dt: D.dtype, ptr: str, val: str, exact: bool = False) -> str:
        """`exact`: the value is known to be representable in `dt` (it was just rounded to it), so a
        bf16 store takes its 16 high bits instead of rounding a second time."""
        if exact and dt is D.bfloat16:
            return f"*({ptr}) = tj_bf16_bits({val})"
        return f"*({ptr}) = {self.to_mem(dt, val)}"

    @staticmethod
    def to_mem(dt: D.dtype, x: str) -> str:
        """A register value as its element in memory (fp16/bf16: its 16 bits)."""
        return {D.float16: f"tj_f2h({x})", D.bfloat16: f"tj_f2bf({x})", D.int1: f"(uint8_t)({x})"}.get(dt, x)

    def reduce_identity(self, kind: str, dt: D.dtype) -> str:
        if kind == "sum":
            return self.literal(0, dt)
        if dt.is_floating():
            return self.literal(-math.inf if kind == "max" else math.inf, dt)
        if dt.is_bool():
            return "false" if kind == "max" else "true"
        return f"tj_lowest<{self.reg_type(dt)}>()" if kind == "max" else f"tj_highest<{self.reg_type(dt)}>()"

    def combine(self, kind: str, acc: str, x: str, dt: D.dtype) -> str:
        if kind == "sum":
            e = f"({acc} + {x})"
            return self._round(e, dt) if dt in self.round_fn else e
        return f"tj_r{kind}({acc}, {x})"   # max/min reductions never see NaN (compiler/value_rules.py)

    def simd_reduction_pragma(self, kind: str, dt: D.dtype, var: str = "acc") -> str | None:
        """OpenMP SIMD reduction clause for a fast-policy reduction, or None for a sequential loop."""
        if dt.is_bool() or dt in self.round_fn:
            return None
        op = {"sum": "+", "and": "&"}.get(kind, kind)
        return f"#pragma omp simd reduction({op}:{var})"

    def dot_step(self, a: str, b: str, c: str, acc_dt: D.dtype) -> str:
        if acc_dt.is_floating():
            return (self.float_math_f64 if acc_dt is D.float64 else self.float_math)["fma"].format(a, b, c)
        return f"({c} + ({self.reg_type(acc_dt)}){a} * ({self.reg_type(acc_dt)}){b})"
