"""Scalar and pointer dtypes shared by the tile language, the IR and the targets.

Names follow Triton (`fp32`, `bf16`, `int1`, ...), so `str(tl.float32)` reads the same in both.
"""
from __future__ import annotations

import torch


class dtype:
    """A scalar element type. Instances are interned: compare with `is` or `==`."""

    __slots__ = ("name", "bits", "kind")
    _by_name: dict[str, "dtype"] = {}

    def __new__(cls, name: str, bits: int, kind: str):
        key = name
        if key in cls._by_name:
            return cls._by_name[key]
        self = object.__new__(cls)
        self.name, self.bits, self.kind = name, bits, kind
        cls._by_name[key] = self
        return self

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
int1 = dtype("int1", 1, "b")
int8 = dtype("int8", 8, "i")
int16 = dtype("int16", 16, "i")
int32 = dtype("int32", 32, "i")
int64 = dtype("int64", 64, "i")
uint8 = dtype("u8", 8, "u")       # spelled as Triton's str(tl.uint8)
uint16 = dtype("u16", 16, "u")
uint32 = dtype("u32", 32, "u")
uint64 = dtype("u64", 64, "u")

# Element types a kernel argument tensor may have; fp64 is kept out on purpose (Kunlun has none).
TORCH_TO_DTYPE = {
    torch.float32: float32, torch.float16: float16, torch.bfloat16: bfloat16,
    torch.int32: int32, torch.int64: int64, torch.bool: int1, torch.int8: int8, torch.int16: int16,
    torch.float8_e5m2: float8e5, torch.float8_e4m3fn: float8e4nv, torch.uint8: uint8,
    **{getattr(torch, f"uint{n}"): d for n, d in ((16, uint16), (32, uint32), (64, uint64)) if hasattr(torch, f"uint{n}")},
}
DTYPE_TO_TORCH = {v: k for k, v in TORCH_TO_DTYPE.items()}


def from_name(name: str) -> dtype:
    """The dtype spelled `name` (`fp32`, `*bf16`, ...); also accepts Triton's dtype objects' names."""
    if name.startswith("*"):
        return pointer_type(from_name(name[1:]))
    try:
        return dtype._by_name[name]
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
