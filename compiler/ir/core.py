"""Tile IR core: typed SSA values, ops with nested blocks, functions.

Values carry only a type (dtype + static shape) and the source location that made them; names
are given when printed, so the printed text and the structural hash do not depend on object ids,
file paths or line numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..dtypes import dtype


@dataclass(frozen=True)
class TileType:
    """dtype plus a static shape; shape () is a scalar."""

    dtype: dtype
    shape: tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def with_dtype(self, d: dtype) -> "TileType":
        return TileType(d, self.shape)

    def with_shape(self, shape) -> "TileType":
        return TileType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype.name
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Loc:
    """Where in the user's source a value was made."""

    filename: str
    lineno: int
    col: int = 0
    kernel: str = ""


class Value:
    __slots__ = ("type", "loc", "owner", "name_hint")

    def __init__(self, type: TileType, loc: Loc | None = None, owner: "Op | None" = None,
                 name_hint: str = ""):
        self.type = type
        self.loc = loc
        self.owner = owner          # the op that defines it; None for block arguments
        self.name_hint = name_hint  # parameter names only, for readable sources

    @property
    def dtype(self) -> dtype:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __repr__(self) -> str:
        return f"<Value {self.type}>"


class Block:
    """A straight-line list of ops with arguments (loop bodies take iv + carried values)."""

    def __init__(self, args: list[Value] | None = None):
        self.args: list[Value] = list(args or [])
        self.ops: list[Op] = []

    def append(self, op: "Op") -> "Op":
        self.ops.append(op)
        return op


class Op:
    __slots__ = ("name", "operands", "results", "attrs", "blocks", "loc")

    def __init__(self, name: str, operands: list[Value], result_types: list[TileType],
                 attrs: dict[str, Any] | None = None, blocks: list[Block] | None = None,
                 loc: Loc | None = None):
        self.name = name
        self.operands = list(operands)
        self.attrs = dict(attrs or {})
        self.blocks = list(blocks or [])
        self.loc = loc
        self.results = [Value(t, loc, self) for t in result_types]

    @property
    def result(self) -> Value:
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Op {self.name} {self.attrs}>"


@dataclass
class Param:
    name: str
    type: TileType
    value: Value
    hints: dict[str, Any] = field(default_factory=dict)   # e.g. {"divisible_by": 16}


@dataclass
class Function:
    """One kernel: parameters (runtime args only; constexprs are folded away) and a body block."""

    name: str
    params: list[Param]
    body: Block
    specialization: dict[str, Any] = field(default_factory=dict)

    def walk(self):
        """All ops, nested blocks included, in program order."""
        yield from walk_block(self.body)


def walk_block(block: Block):
    for op in block.ops:
        yield op
        for b in op.blocks:
            yield from walk_block(b)
