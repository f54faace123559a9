"""The records the C-family lowering keeps while it emits a program (local buffers, loop nests), and
which ops write memory (what a value read later may not be moved across)."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import Op, Value
from compiler.ir.ops import OPS


@dataclass(frozen=True)
class LocalBuffer:
    """One local array a program declares: the single record of a kernel's local-memory footprint
    (the cpu target's stack check and the kunlun target's LM budget both read it)."""

    name: str
    ctype: str
    numel: int
    nbytes: int
    value: Value | None = None     # the IR value it holds; None for scratch (trees, staging)


@dataclass
class Nest:
    """Statements of one loop nest body, with a per-element memo of evaluated values."""

    idx: tuple[str, ...]
    stmts: list[str] = field(default_factory=list)
    memo: dict = field(default_factory=dict)


def writes_memory(op: Op) -> bool:
    """Whether `op`, or an op in its regions, writes memory."""
    if OPS[op.name].has("writes_global"):
        return True
    return any(writes_memory(o) for b in op.blocks for o in b.ops)
