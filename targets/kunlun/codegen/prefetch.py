"""Double-buffered loads (a mixin of KunlunLowering): a loop's loads that plan/prefetch.py finds
are fetched one iteration ahead into the other slot of a two-slot LM buffer.

    T* const pf[2n];                       // before the loop: both slots, live across it
    for (k = 0; k < n_trips; ++k) {
        iv = lb + k * st;
        T* const cur = pf + (k & 1) * n;   // this iteration's tile
        T* const next = pf + ((k + 1) & 1) * n;
        if (k == 0) { the load, into cur, waited for }
        if (k + 1 < n_trips) { its rows for iv + st, GM2LM_ASYNC into next }
        ... the body, reading cur ...
        mfence();                          // the next iteration's tile has landed
    }

The body's ops never touch `next`, and the `mfence()` that ends the body orders everything
against the next iteration, so the fence stage sees the slots through `cur` alone (registered at
the slot's first half: the same bytes for every k, which orders the two slots alike).
"""
from __future__ import annotations

from compiler.ir.ops import CONST, LOAD, OPS
from targets.cfamily.masks import runtime_mask

from ..plan.prefetch import Ahead, ahead


class Prefetching:
    def init_prefetch(self, enabled: bool, skip: frozenset = frozenset()) -> None:
        """`skip`: ids of loads to leave single-buffered (the plan's choice where LM is short)."""
        self._ahead = ahead(self.fn, self.staged) if enabled else {}
        self._skip = skip
        self.prefetched: dict[int, int] = {}   # load op id -> bytes of its second slot
        self._cur: dict[int, str] = {}         # prefetched load op -> its slot for this iteration
        self._wait_at_end: set[int] = set()    # loop bodies that end by waiting for their prefetches
        self._body_flags: dict[int, dict[int, str]] = {}   # loop body -> {mask: this iteration's flag}

    def _prefetched(self, loop) -> list[Ahead]:
        if self._shadowing or id(loop) in self.shadowed:
            return []
        return [a for a in self._ahead.get(id(loop), ())
                if id(a.load) not in self._skip and self._fetches_rows_async(a.load)]

    def _fetches_rows_async(self, load) -> bool:
        """Whether `load` is copied row by row with a DMA GM2LM_ASYNC can do: a plain one, or the
        raw halves of an fp16/bf16 row (widened in place after the wait)."""
        v = load.results[0]
        if not (self.d.same_repr(v.dtype) or v.dtype in self.d.dma_suffix):
            return False
        axis = self._row_axis(load.operands[0])
        return axis is not None and all(n == 1 for n in v.shape[axis + 1:])

    def raw_rows_async(self, dt):
        """The `_copy_rows` batch form of an fp16/bf16 row fetched ahead: its raw halves into the
        upper half of the row's floats, as the converting copy lands them (tilejit_xpu.h)."""
        size = f"(int)sizeof({self.d.mem_type(dt)})"
        return lambda gm, row, start, n: \
            f"GM2LM_ASYNC({gm}, (tj_u16_alias*)({self._lm_at(row, start)}) + ({n}), ({n}) * {size});"

    def _widen_rows(self, load, cur: str) -> None:
        """The rows of a raw fp16/bf16 tile in `cur`, widened in place."""
        v = load.results[0]
        axis = self._row_axis(load.operands[0])
        self.begin_group()
        idx0, opened = self._open_rows(v.shape, axis)
        base = self.linear(idx0, v.shape)
        self.emit(f"tj_widen_{self.d.dma_suffix[v.dtype]}({cur if base == '0' else f'{cur} + {base}'}, "
                  f"{v.shape[axis]});")
        self._close(opened)

    def open_for(self, op, lb: str, ub: str, st: str):
        loads = self._prefetched(op)
        slots, flags = [], []
        for a in loads:
            v = a.load.results[0]
            slots.append(self.local_buffer(self.d.reg_type(v.dtype), self.fresh("pf"), 2 * v.type.numel, v))
            # the mask's in-bounds flag, computed one iteration ahead with the tile, for the body
            flags.append(self.fresh("inbpf") if _checked_mask(a.load) is not None else None)
            if flags[-1]:
                self.emit(f"int {flags[-1]} = 1;")
        k, trip = super().open_for(op, lb, ub, st)
        if not loads:
            return k, trip
        start = self.times[id(op)]
        end = next(e for s, e in self.ranges if s == start)
        self.indent += 1   # the body's first lines
        for a, slot, flag in zip(loads, slots, flags):
            self.refs[slot].append(end)   # both slots stay live to the loop's end
            self._double_buffer(op, a, slot, flag, k, trip, st)
        self.indent -= 1
        self._wait_at_end.add(id(op.blocks[0]))
        return k, trip

    def _double_buffer(self, loop, a: Ahead, slot: str, flag: str | None, k: str, trip: str, st: str) -> None:
        """The top of `loop`'s body for load `a`: this iteration's slot (filled here when k is 0,
        widened when it came raw), and the next iteration's tile issued into the other one."""
        iv = loop.blocks[0].args[0]
        cur = self._slot_pointer(a.load, slot, f"({k} & 1)")
        nxt = self._slot_pointer(a.load, slot, f"(({k} + 1) & 1)", note=False)
        self.flow_open("branch", f"if ({k} == 0) {{")
        trips = self.loop_trips.pop()   # once per entry into the loop
        try:
            self._scoped(lambda: self._fetch(a, cur, iv, None, False, flag))
        finally:
            self.loop_trips.append(trips)
        if self.fences is not None and slot in self.lm_range:
            # iteration 0 goes on to fill the second slot, which the fence stage otherwise sees
            # only through `cur`: what is still pending on its bytes from before the loop is
            # ordered here, in iteration 0 alone
            lo, hi = self.lm_range[slot]
            self.begin_group()
            self._access(slot, "D", True, ((lo + hi) // 2, hi), f"the second slot of {slot}")
        self.flow_close("}")
        if flag:
            this = self.fresh("inb")
            self.emit(f"const int {this} = {flag};")
            self._body_flags.setdefault(id(loop.blocks[0]), {}).setdefault(id(_checked_mask(a.load)), this)
        if not self.d.same_repr(a.load.results[0].dtype):   # fetched raw unless its mask cut it
            self.flow_open("branch", f"if ({k} > 0{f' && {this}' if flag else ''}) {{")
            self._scoped(lambda: self._widen_rows(a.load, cur))
            self.flow_close("}")
        self.flow_open("branch", f"if ({k} + 1 < {trip}) {{")
        self._scoped(lambda: self._fetch(a, nxt, iv, f"{self.name(iv)} + {st}", True, flag))
        self.flow_close("}")
        self._cur[id(a.load)] = cur
        self.prefetched[id(a.load)] = next(b.nbytes // 2 for b in self.requests if b.name == slot)

    def _slot_pointer(self, load, slot: str, parity: str, note: bool = True) -> str:
        v = load.results[0]
        name = self.fresh("cur" if note else "next")
        ctype = self.d.reg_type(v.dtype)
        self.emit_declaration(f"{ctype}* const {name} = {slot} + {parity} * {v.type.numel};")
        if note and self.placement is not None:
            buf = next(b for b in reversed(self.requests) if b.name == slot)
            self.note_buffer(name, self.placement[buf.index], buf.nbytes // 2)
        return name

    def _fetch(self, a: Ahead, dst: str, iv, iv_next: str | None, prefetch: bool, keep_flag: str | None) -> None:
        """`a`'s load into `dst`, its addresses computed here (for the iteration whose induction
        variable is `iv_next`, when given): the scalars among the body ops it needs are emitted
        under fresh names, the tiles evaluated in place. The mask's in-bounds flag is copied into
        `keep_flag`."""
        bound: dict[int, str | None] = {}
        added: list[int] = []   # loaded tiles held in a buffer here, and only here

        def bind(v, name: str) -> None:
            bound.setdefault(id(v), self.names.get(id(v)))
            self.names[id(v)] = name
        try:
            if iv_next is not None:
                t = self.fresh("iv")
                self.emit(f"const {self.d.reg_type(iv.dtype)} {t} = {iv_next};")
                bind(iv, t)
                for arg, step in a.advances.items():   # carried offsets: one step further
                    t = self.fresh("s")
                    nxt = f"{self.name(arg)} + {self.ev(step, (), None)}"
                    self.emit(f"{self.d.reg_type(arg.dtype)} const {t} = {nxt};")
                    bind(arg, t)
            for op in a.needs:
                v = op.results[0]
                if op.name == LOAD:   # an index the addresses read (a page of a block table)
                    bind(v, self.fresh("s" if v.type.is_scalar else "ld"))
                    if v.type.is_scalar:
                        self.emit_load(op)
                    else:
                        self.local_buffer(self.d.reg_type(v.dtype), self.names[id(v)], v.type.numel, v)
                        added.append(id(v))
                        self.buffers.add(id(v))
                        self._load_into(op, self.names[id(v)])
                    continue
                if not v.type.is_scalar or op.name == CONST:
                    continue
                t = self.fresh("s")
                expr = self.d.program_id(op.name, op.attrs["axis"]) if OPS[op.name].has("grid_index") \
                    else self._ev_op(op, v, (), None)
                self.emit(f"{self.d.reg_type(v.dtype)} const {t} = {expr};")
                bind(v, t)
            self._load_into(a.load, dst, prefetch=prefetch)
            if keep_flag:
                mask = _checked_mask(a.load)
                flag = next(sc[id(mask)] for sc in reversed(self.flag_scopes) if id(mask) in sc)
                self.emit(f"{keep_flag} = {flag};")
        finally:
            self.buffers.difference_update(added)
            for key, old in bound.items():
                if old is None:
                    self.names.pop(key, None)
                else:
                    self.names[key] = old

    def take_prefetched(self, op) -> bool:
        """A prefetched load where the body reaches it: its value is this iteration's slot."""
        cur = self._cur.get(id(op))
        if cur is None:
            return False
        v = op.results[0]
        self.names[id(v)] = cur
        self.buffers.add(id(v))
        return True

    def lower_block(self, block) -> None:
        self.flag_scopes[-1].update(self._body_flags.get(id(block), {}))   # the body's own scope
        super().lower_block(block)
        if id(block) in self._wait_at_end:
            self.emit_full_fence("waits for the tiles fetched ahead for the next iteration")


def _checked_mask(load):
    """The mask a load checks at run time, or None."""
    return runtime_mask(load.operands[1] if len(load.operands) > 1 else None)
