"""How the Kunlun lowering reports its LM accesses to the fence stage (a mixin of KunlunLowering).

The emitted code is cut into groups: each IR op, and inside an op each vector nest, dot and DMA
copy starts one. A group says which buffers it reaches through the SIMD unit or the DMA engine
(`begin_group`); a buffer a line names outside a DMA call, other than the group's vector
operands, is a scalar access (a masked load's `other`, the dot's scalar A operand). Each access
goes to `plan.fences.Fences` with the buffer's arena bytes (so buffers placed over each other
are one location); a fence it asks for is placed at the start of the group, outside the group's
loop nests. A scalar access is also announced to the emulation (`TJ_LM_SCALAR`, nothing on the
device), which checks the fence rules at run time; vector and DMA accesses it sees itself.

Only emit mode (a placement) tracks accesses; record mode has no addresses yet.
"""
from __future__ import annotations

import re

from ..plan.fences import FULL_FENCE, Access, Fences

_IDENT = re.compile(r"[A-Za-z_]\w*")
# a DMA call as the lowering spells it (its arguments hold no `;`): the engine's access, declared
# by the group, not a scalar one
_DMA_CALL = re.compile(r"\b(?:GM2LM(?:_ASYNC)?|LM2GM(?:_ASYNC)?|tj_gm2lm_\w+|tj_lm2gm_\w+)\([^;]*?\);")


class FencedAccess:
    def init_access(self) -> None:
        self.fences = Fences() if self.placement is not None else None
        self.lm_range: dict[str, tuple[int, int]] = {}
        self._declaring_line = False
        self.begin_group()

    def note_buffer(self, name: str, offset: int, nbytes: int) -> None:
        if self.fences is not None:
            self.lm_range[name] = (offset, offset + nbytes)

    def begin_group(self, vector_or_dma: dict[str, tuple[str, bool]] | None = None) -> None:
        """Starts a group; `vector_or_dma` maps a buffer to (units, written): "V", "D", or "DV"
        for a DMA whose data the vector unit then converts in place."""
        self._group_at, self._group_indent, self._group_head = len(self.lines), self.indent, 0
        self._group_made: list[Access] = []   # accesses of this group so far: after its fences
        self._named = dict(vector_or_dma or {})
        self._scalar_seen: set[str] = set()
        for name, (units, write) in self._named.items():
            for unit in units:
                self._access(name, unit, write)

    def _access(self, name: str, unit: str, write: bool, part: tuple[int, int] | None = None,
                what: str | None = None) -> None:
        """`unit` reaches buffer `name` (or bytes `part` of the arena, described as `what`)."""
        if self.fences is None or name not in self.lm_range:
            return
        lo, hi = part or self.lm_range[name]
        a = Access(lo, hi, unit, write, what or name)
        fence = self.fences.access(a)
        pad = "    " * self._group_indent
        if fence:
            # placed at the group's start, so the group's earlier accesses come after it
            self.lines.insert(self._group_at, f"{pad}{fence}();")
            self._group_head += 1
            self.fences.pending_again(self._group_made)
        self._group_made.append(a)
        if unit == "S":
            self.lines.insert(self._group_at + self._group_head, f"{pad}TJ_LM_SCALAR({name}, {hi - lo});")
            self._group_head += 1

    def emit_full_fence(self, why: str) -> None:
        """An `mfence()` the code needs where it stands (an asynchronous DMA batch waits there):
        emitted, and the fence stage knows everything before it is ordered."""
        self.emit(f"{FULL_FENCE}();")
        if self.fences is not None:
            self.fences.fenced_here(FULL_FENCE, why)

    def emit(self, line: str) -> None:
        super().emit(line)
        if self.fences is None or self._declaring_line:
            return
        for ident in _IDENT.findall(_DMA_CALL.sub("", line)):
            if ident in self.lm_range and self._named.get(ident, ("S",))[0] != "V" and ident not in self._scalar_seen:
                self._scalar_seen.add(ident)
                self._access(ident, "S", True)   # read or write: counted as both

    def emit_declaration(self, line: str) -> None:
        """A buffer's declaration names it without touching it."""
        self._declaring_line = True
        try:
            self.emit(line)
        finally:
            self._declaring_line = False
        # the group's fences and announcements now go after it (they may name this buffer)
        self._group_at, self._group_head, self._group_made = len(self.lines), 0, []

    def lower(self) -> str:
        # the kernel's stride loop runs one program after another on a core: that is a back edge too
        if self.fences is not None:
            self.fences.open("loop")
        self.lower_block(self.fn.body)
        if self.fences is not None:
            self._place_back_edge_fence(self.indent)
        return "\n".join(self.lines)

    def _place_back_edge_fence(self, indent: int) -> None:
        fence = self.fences.close()
        if fence:
            self.lines.append("    " * indent + f"{fence}();")

    # -- control flow (hooks of the C-family lowering, which own the brace lines) -------------------
    def flow_open(self, kind: str, line: str) -> None:
        super().flow_open(kind, line)
        if self.fences is not None:
            self.fences.open(kind)
        self.begin_group()

    def flow_next_branch(self, line: str) -> None:
        super().flow_next_branch(line)
        if self.fences is not None:
            self.fences.next_branch()
        self.begin_group()

    def flow_close(self, line: str) -> None:
        if self.fences is not None:
            self._place_back_edge_fence(self.indent + 1)   # a loop's; a branch places none
        super().flow_close(line)
        self.begin_group()
