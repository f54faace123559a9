"""The records the C-family lowering keeps while it emits a program: local buffers and loop nests."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import Value


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
