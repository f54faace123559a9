"""Scalar and pointer dtypes shared by the tile language, the IR and the targets.

Names follow Triton (`fp32`, `bf16`, `int1`, ...), so `str(tl.float32)` reads the same in both.
"""
from __future__ import annotations

import math

import torch


class dtype:
    """A scalar element type. Instances are interned: compare with `is` or `==`.

    Host code sees Triton's dtype surface: `tl.dtype("uint8")` (Triton's names, as in
    `dtype.SINT_TYPES` / `UINT_TYPES` / `FP_TYPES`), `primitive_bitwidth`, `itemsize`,
    `int_bitwidth`, `fp_mantissa_width`, `exponent_bias`, `scalar`, and the predicates
    (`is_fp8()`, `is_fp16()`, `is_int_signed()`, `is_standard_floating()`, ...), which kernels
    may also call on `ptr.dtype.element_ty` at compile time."""

    __slots__ = ("name", "bits", "kind")
    _by_name: dict[str, "dtype"] = {}
    SINT_TYPES = ["int8", "int16", "int32", "int64"]
    UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
    FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
    STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
    OTHER_TYPES = ["void"]

    def __new__(cls, name: str, bits: int | None = None, kind: str | None = None):
        key = _TRITON_NAMES.get(name, name)
        if key in cls._by_name:
            return cls._by_name[key]
        if bits is None:   # Triton's `tl.dtype(name)`: only the names it knows
            known = ", ".join(cls.SINT_TYPES + cls.UINT_TYPES + cls.FP_TYPES)
            raise ValueError(f"unknown dtype {name!r}; known: {known}")
        self = object.__new__(cls)
        self.name, self.bits, self.kind = name, bits, kind
        cls._by_name[key] = self
        return self

    # -- Triton's host surface -----------------------------------------------------------------
    @property
    def triton_name(self) -> str:
        """Triton's name of this dtype (`uint8` where tilejit prints `u8`)."""
        return _TRITON_SPELLING.get(self.name, self.name)

    @property
    def itemsize(self) -> int:
        return self.bits // 8   # Triton's: 0 for int1

    @property
    def int_bitwidth(self) -> int:
        return self.bits

    @property
    def fp_mantissa_width(self) -> int | None:
        return _FLOAT_FORMATS.get(self.name, (None, None))[0]

    @property
    def exponent_bias(self) -> int | None:
        return _FLOAT_FORMATS.get(self.name, (None, None))[1]

    @property
    def scalar(self) -> "dtype":
        return self

    def is_fp8(self) -> bool:
        return self.name.startswith("fp8")

    def is_standard_floating(self) -> bool:
        return self.name in ("fp16", "bf16", "fp32", "fp64")

    def is_int_signed(self) -> bool:
        return self.kind == "i"

    def is_int_unsigned(self) -> bool:
        return self.kind in ("u", "b")

    def get_int_max_value(self) -> int:
        return self.int_range()[1]

    def get_int_min_value(self) -> int:
        return self.int_range()[0]

    @staticmethod
    def is_dtype(type_str: str) -> bool:
        return type_str in dtype.SINT_TYPES + dtype.UINT_TYPES + dtype.FP_TYPES + dtype.OTHER_TYPES

    def is_block(self) -> bool:
        return False

    def is_const(self) -> bool:
        return False

    def __getattr__(self, attr: str):
        # is_fp16(), is_uint32(), is_fp8e4nv(), ...: whether this is that dtype
        if attr.startswith("is_") and _TRITON_NAMES.get(attr[3:], attr[3:]) in dtype._by_name:
            want = _TRITON_NAMES.get(attr[3:], attr[3:])
            return lambda: self.name == want
        raise AttributeError(f"'dtype' object has no attribute '{attr}'")

    # kind: "f" float, "i" signed int, "u" unsigned int, "b" boolean (int1), "p" pointer
    def is_floating(self) -> bool:
        return self.kind == "f"

    def is_int(self) -> bool:
        return self.kind in ("i", "b", "u")

    def is_unsigned(self) -> bool:
        return self.kind == "u"

    def int_range(self) -> tuple[int, int]:
        """(lowest, highest) value of an integer dtype."""
        if self.kind == "u":
            return 0, 2 ** self.bits - 1
        if self.kind == "b":
            return 0, 1
        return -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1

    def is_bool(self) -> bool:
        return self.kind == "b"

    def is_ptr(self) -> bool:
        return False

    @property
    def primitive_bitwidth(self) -> int:
        return self.bits

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __reduce__(self):
        return (from_name, (self.name,))


class pointer_type(dtype):
    """Pointer to elements of `element_ty` in the kernel's global memory."""

    __slots__ = ("element_ty",)

    def __new__(cls, element_ty: dtype):
        name = f"*{element_ty.name}"
        if name in dtype._by_name:
            return dtype._by_name[name]
        self = object.__new__(cls)
        self.name, self.bits, self.kind = name, 64, "p"
        self.element_ty = element_ty
        dtype._by_name[name] = self
        return self

    def is_ptr(self) -> bool:
        return True

    @property
    def address_space(self) -> int:
        return 1

    @property
    def triton_name(self) -> str:
        return f"pointer<{self.element_ty.triton_name}>"


# Triton's names where tilejit's differ, and the float formats' (mantissa bits, exponent bias)
_TRITON_SPELLING = {"u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64"}
_TRITON_NAMES = {v: k for k, v in _TRITON_SPELLING.items()}
_FLOAT_FORMATS = {"fp8e4b15": (3, 15), "fp8e4nv": (3, 7), "fp8e4b8": (3, 8), "fp8e5": (2, 15), "fp8e5b16": (2, 16),
                  "fp16": (10, 15), "bf16": (7, 127), "fp32": (23, 127), "fp64": (52, 1023)}

float32 = dtype("fp32", 32, "f")
float16 = dtype("fp16", 16, "f")
bfloat16 = dtype("bf16", 16, "f")
float64 = dtype("fp64", 64, "f")
# fp8 formats are storage types: values load and store as their bits, and every conversion to or
# from another dtype is a defined sequence of integer operations (semantic.py), so arithmetic
# on them happens in fp32
float8e5 = dtype("fp8e5", 8, "f")      # e5m2: IEEE-like, with inf and NaN
float8e4nv = dtype("fp8e4nv", 8, "f")  # e4m3fn: no inf; the one NaN pattern is s.1111.111
FP8 = (float8e5, float8e4nv)
# fp8 formats Triton names that no kernel here computes with: host code may name and inspect them;
# a kernel that uses one gets a CompilationError (compiler/frontend_names.py)
float8e4b15 = dtype("fp8e4b15", 8, "f")
float8e4b8 = dtype("fp8e4b8", 8, "f")
float8e5b16 = dtype("fp8e5b16", 8, "f")
UNSUPPORTED_FP8 = (float8e4b15, float8e4b8, float8e5b16)
int1 = dtype("int1", 1, "b")
int8 = dtype("int8", 8, "i")
int16 = dtype("int16", 16, "i")
int32 = dtype("int32", 32, "i")
int64 = dtype("int64", 64, "i")
uint8 = dtype("u8", 8, "u")       # spelled as Triton's str(tl.uint8)
uint16 = dtype("u16", 16, "u")
uint32 = dtype("u32", 32, "u")
uint64 = dtype("u64", 64, "u")

# Element types a kernel argument tensor may have (fp64: computed in fp64 on cpu and gpu; the
# kunlun target, which has none, computes it in fp32 and says so: docs/kunlun.md)
TORCH_TO_DTYPE = {
    torch.float64: float64, torch.float32: float32, torch.float16: float16, torch.bfloat16: bfloat16,
    torch.int32: int32, torch.int64: int64, torch.bool: int1, torch.int8: int8, torch.int16: int16,
    torch.float8_e5m2: float8e5, torch.float8_e4m3fn: float8e4nv, torch.uint8: uint8,
    **{getattr(torch, f"uint{n}"): d for n, d in ((16, uint16), (32, uint32), (64, uint64)) if hasattr(torch, f"uint{n}")},
}
DTYPE_TO_TORCH = {v: k for k, v in TORCH_TO_DTYPE.items()}


def from_name(name: str) -> dtype:
    """The dtype spelled `name` (`fp32`, `*bf16`, ...); also accepts Triton's dtype objects' names
    (`uint8`, `pointer<fp16>`)."""
    if name.startswith("*"):
        return pointer_type(from_name(name[1:]))
    if name.startswith("pointer<") and name.endswith(">"):
        return pointer_type(from_name(name[8:-1]))
    try:
        return dtype._by_name[_TRITON_NAMES.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(dtype._by_name)}") from None


def float_rank(d: dtype) -> int:
    return {"fp8e5": 0, "fp8e4nv": 0, "fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}[d.name]


def promote(a: dtype, b: dtype) -> dtype:
    """Result dtype of a binary arithmetic op between two tensors (Triton's rules, simplified)."""
    if a is b:
        return a
    if a.is_floating() or b.is_floating():
        if a.is_floating() and b.is_floating():
            if {a.name, b.name} == {"fp16", "bf16"} or (a in FP8 and b in FP8):
                return float32
            return a if float_rank(a) >= float_rank(b) else b
        return a if a.is_floating() else b
    # both integer (int1 promotes to the other); mixed signedness: the unsigned type when it is at
    # least as wide, else the signed one (Triton's rule, as C's)
    if a.is_bool():
        return b
    if b.is_bool():
        return a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    u, i = (a, b) if a.is_unsigned() else (b, a)
    return u if u.bits >= i.bits else i


def representable(value, d: dtype) -> bool:
    """Whether the number `value` is exactly a value of the float dtype `d` (NaN and the infinities
    are; so is every float of fp32 for fp32)."""
    t = DTYPE_TO_TORCH.get(d)
    v = float(value)
    if t is None or not d.is_floating() or math.isnan(v):
        return d.is_floating()
    return float(torch.tensor(v, dtype=torch.float64).to(t).double()) == v
