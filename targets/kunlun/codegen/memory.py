"""How the Kunlun lowering asks for local memory and moves data (a mixin of KunlunLowering).

The lowering runs twice per kernel. In *record* mode (`placement` None) it notes every LM buffer
it needs (`local_buffer`), the op times at which the emitted code references each one, the
buffers an elementwise result may overwrite in place, and every DMA site; the memory plan
(targets/kunlun/plan) turns that into offsets in one arena. In *emit* mode each buffer is a
pointer at its planned offset of the arena `tj_lm`, so the source says exactly what the plan
decided."""
from __future__ import annotations

import re

from compiler.ir import Op
from compiler.ir.analysis import const_value

from ..plan.liveness import number_ops
from ..plan.model import DMA, NOMINAL_TRIPS, LMBuffer
from ..plan.scratch import is_scratch
from ..plan.stripmine import bases

_IDENT = re.compile(r"[A-Za-z_]\w*")


class PlannedMemory:
    def init_memory(self, placement: dict[int, int] | None) -> None:
        self.placement = placement
        self.times, self.ranges = number_ops(self.fn)
        self.cur_time = 0
        self.requests: list[LMBuffer] = []
        self.refs: dict[str, list[int]] = {}
        self.dma_sites: list[DMA] = []
        self.loop_trips: list[int | None] = []   # enclosing loops: static trip count, or None
        self.work = 0.0   # elements the loop nests touch, times the enclosing loops' trips (nominal ones too)
        self.vector_nest_work = 0.0   # the same for 16-lane vector nests (not in `work`)
        self.vector_dot_work = 0.0    # the part of `work` that vector dots do
        self._declaring = None
        self._inplace: tuple[str, ...] = ()
        # the GM scratch tier's tensors (plan/scratch.py), and the pointer of the access being emitted
        self._scratch_ids = {id(p.value) for p in self.fn.params if is_scratch(p)}
        self.dma_pointer = None
        self._sharing = False   # emitting a staged load's leader branch: its DMA serves the team
        self._shadowing = False  # emitting a shadow iteration (lowering.py): no DMA site of its own
        self.init_access()

    # -- buffers -----------------------------------------------------------------------------------
    def local_buffer(self, ctype: str, name: str, numel: int, value=None) -> str:
        kind = "value" if value is not None and value is self._declaring else "scratch"
        buf = LMBuffer(len(self.requests), name, ctype, numel, numel * self.d.ctype_size(ctype), value, kind,
                       inplace=self._inplace)
        self._inplace = ()
        self.requests.append(buf)
        self.refs[name] = [self.cur_time]
        if self.placement is None:
            self.emit(f"{ctype} {name}[{numel}];")
        else:
            self.note_buffer(name, self.placement[buf.index], buf.nbytes)
            self.emit_declaration(f"{ctype}* const {name} = ({ctype}*)(tj_lm + {self.placement[buf.index]});")
        return name

    def redeclare(self, name: str) -> str:
        """A buffer declared before, named again in another scope (a shadow iteration's branch)."""
        buf = next(b for b in reversed(self.requests) if b.name == name)
        if self.placement is None:
            self.emit(f"{buf.ctype} {name}[{buf.numel}];")
        else:
            self.emit_declaration(f"{buf.ctype}* const {name} = ({buf.ctype}*)(tj_lm + {self.placement[buf.index]});")
        return name

    def declare_buffer(self, v, name=None) -> str:
        self._declaring = v
        try:
            return super().declare_buffer(v, name)
        finally:
            self._declaring = None

    def allow_in_place(self, v) -> None:
        """The next buffer (holding `v`, computed element by element) may overwrite any buffer that
        `v`'s expression reads only at the element being written."""
        reads = self._carried_reads(v, set(self.buffers))
        self._inplace = tuple(self.names[i] for i, same_index in reads.items() if same_index)

    def emit(self, line: str) -> None:
        super().emit(line)
        if self.placement is None:
            for ident in _IDENT.findall(line):
                r = self.refs.get(ident)
                if r is not None and r[-1] != self.cur_time:
                    r.append(self.cur_time)

    # -- where the emitted code is -----------------------------------------------------------------
    def lower_op(self, op: Op) -> None:
        self.cur_time = self.times[id(op)]
        self.begin_group()
        super().lower_op(op)

    @staticmethod
    def static_trips(op: Op) -> int | None:
        """A `for` op's trip count when it is known at compile time (tj_trip_count's rule)."""
        lb, ub, st = (const_value(v) for v in op.operands[:3])
        if None in (lb, ub, st) or st == 0:
            return None
        return max(0, (ub - lb + st - 1) // st if st > 0 else (lb - ub - st - 1) // -st)

    def op_for(self, op: Op) -> None:
        self.loop_trips.append(self.static_trips(op))
        try:
            super().op_for(op)
        finally:
            self.loop_trips.pop()

    def loop_weight(self) -> float:
        """How often the code being emitted runs per program (run-time loops: NOMINAL_TRIPS each)."""
        w = 1.0
        for t in self.loop_trips:
            w *= t if t is not None else NOMINAL_TRIPS
        return w

    def open_nest(self, shape, simd: bool = True, order=None):
        n = 1
        for d in shape:
            n *= d
        self.work += n * self.loop_weight()
        return super().open_nest(shape, simd, order)

    def record_dma(self, kind: str, buffer: str, elem_bytes: int, elems: int, transfers: int,
                   shared: bool = False, batched: bool = False, prefetch: bool = False) -> None:
        if self._shadowing:   # a shadow iteration repeats a load the body's site already counts
            return
        static = 1
        for t in self.loop_trips:
            static *= t if t is not None else 1
        scratch = self.dma_pointer is not None and bool(bases(self.dma_pointer) & self._scratch_ids)
        self.dma_sites.append(DMA(kind, buffer, elem_bytes, elems, transfers, static,
                                  sum(t is None for t in self.loop_trips), self.cur_time,
                                  shared or self._sharing, batched,
                                  ahead_in=(self.loop_trips[-1] or 0) if prefetch else None, scratch=scratch))
