"""The C-family lowering with the chip's memory model: compute touches only LM, so every tile a
program reads is copied from GM into an `__local__` buffer (GM2LM, one DMA per contiguous row
segment where the pointer's step allows it) and every result goes back with LM2GM; the fast
policy computes 16 lanes at a time (simd.py)."""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Function, Op, walk_block
from compiler.ir.analysis import index_step
from compiler.ir.ops import FOR
from targets.cfamily.lowering import CLowering, Nest

from ..plan.model import align
from ..plan.staging import shadow_slice, stageable
from . import simd
from .access import FencedAccess
from .memory import PlannedMemory
from .prefetch import Prefetching


class KunlunLowering(Prefetching, PlannedMemory, FencedAccess, CLowering):
    """The C-family lowering with DMA: no load is fused into a consumer (that would read GM
    from compute code); each one fills an LM buffer through GM2LM, each store drains through LM2GM."""

    index_type = "int"

    def __init__(self, fn: Function, dialect, policy: str, placement: dict[int, int] | None = None,
                 vector_f16: bool = False, prefetch: bool = False, skip: frozenset = frozenset()):
        super().__init__(fn, dialect, policy)
        # Kunlun Triton's switches for its vectorize and memory-async passes, as launch options
        # (compiler/launch_options.py; docs/kunlun.md, "Kunlun Triton's options")
        options = fn.specialization.get("options", {})
        self.vector_unit = not options.get("isCloseVectorization")
        self.async_dma = not options.get("isCloseMemoryAsync")
        self.vectorize = policy == "fast" and self.vector_unit   # elementwise nests; strict keeps them scalar
        self.vector_f16 = vector_f16 and self.vector_unit   # the arch widens fp16 with vector loads (float16x32_t)
        staging = stageable(fn)        # loads a cluster's cores share through SM (plan/staging.py)
        self.staged, self.shadowed = staging.loads, staging.shadowed
        self.sm_slots: list[tuple[str, int, int]] = []   # (LM buffer, SM offset, bytes) per staged load
        self._slot_of: dict[int, tuple[int, int]] = {}   # staged load op -> (SM offset, bytes)
        self._shadow_of: dict[int, tuple] = {}   # body of a shadowed loop -> (the loop, its team's trips)
        self._team_iteration = ""   # in a shadow iteration: whether a program of the team runs it
        self.init_memory(placement)
        self.init_prefetch(prefetch and self.async_dma, skip)   # double-buffered loads (prefetch.py), where they fit

    def _load_fuses(self, v) -> bool:
        return False

    # -- 16-lane SIMD (fast policy) --------------------------------------------------------------
    def op_elementwise(self, op: Op) -> None:
        v = op.results[0]
        if v.type.is_scalar or not self._materialize(v):
            super().op_elementwise(op)
            return
        self.allow_in_place(v)

        def scalar(name):
            nest = self.open_nest(v.shape)
            e = self._ev_op(op, v, nest.idx, nest)
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {e};"])
        if not self._vectorised(v, lambda: self.declare_buffer(v), scalar):
            super().op_elementwise(op)

    def update_in_place(self, arg, val) -> None:
        def scalar(name):
            nest = self.open_nest(arg.shape)
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, arg.shape)}] = {self.ev(val, nest.idx, nest)};"])
        if val.shape != arg.shape or not self._vectorised(val, lambda: self.name(arg), scalar):
            super().update_in_place(arg, val)

    def _vectorised(self, v, dest, scalar) -> bool:
        """Emits `v` into the buffer `dest()` names as a vector nest when it has a vector form, or
        else when it has one on the all-true path of the one `where` mask it reads (the tile is in
        bounds), with `scalar(name)` on the other path; False (nothing emitted) when neither."""
        if not self.vectorize:
            return False
        vec = simd.vector_form(self, v)
        if vec is not None:
            simd.vector_nest(self, v.shape, dest(), vec)
            return True
        mask = simd.where_mask(self, v)
        if mask is None:
            return False
        self.known_true.add(id(mask))
        vec = simd.vector_form(self, v)
        self.known_true.discard(id(mask))
        if vec is None:
            return False
        name = dest()

        def fill(masked: bool):
            if masked:
                self.begin_group()
                scalar(name)
            else:
                simd.vector_nest(self, v.shape, name, vec)
        self._masked_or_fast(mask, fill)
        return True

    def op_reduce(self, op: Op) -> None:
        vec = simd.reduction_form(self, op) if self.vectorize else None
        if vec is None:
            super().op_reduce(op)
            return
        simd.emit_reduce(self, op, vec)

    def emit_dot_loops(self, A, B, C, M, N, K, in_dt, acc_dt, ldb=None) -> None:
        # ldb is N here: no operand is read in place from GM (the dialect has no rows_strided)
        self.work += M * N * K * self.loop_weight()
        if self.vector_unit and in_dt.is_floating() and acc_dt is D.float32 and N % simd.LANES == 0:   # svmac
            self.vector_dot_work += M * N * K * self.loop_weight()
            simd.emit_dot(self, A, B, C, M, N, K)
            return
        super().emit_dot_loops(A, B, C, M, N, K, in_dt, acc_dt)

    def _gm2lm(self, dt, ptr: str, dst_lvalue: str) -> str:
        d = self.d
        if d.same_repr(dt):
            return f"GM2LM({ptr}, &{dst_lvalue}, sizeof({d.mem_type(dt)}));"
        return (f"{{ {d.mem_type(dt)} s_; GM2LM({ptr}, &s_, sizeof({d.mem_type(dt)})); "
                f"{dst_lvalue} = {d.from_mem(dt, 's_')}; }}")

    def _lm2gm(self, dt, ptr: str, val: str) -> str:
        d = self.d
        return f"{{ {d.mem_type(dt)} s_ = {d.to_mem(dt, val)}; LM2GM(&s_, {ptr}, sizeof({d.mem_type(dt)})); }}"

    # -- DMA ------------------------------------------------------------------------------------
    def _row_axis(self, ptr, transposed_ok: bool = False) -> int | None:
        """The axis a tile is copied along, one DMA per contiguous segment: the last axis longer than
        1 when the pointer advances by exactly one element along it; with `transposed_ok`, else an
        earlier such axis (a K^T tile: contiguous down its columns). None: per-element copies
        (gathers, strided tiles, bool tiles)."""
        if ptr.dtype.element_ty is D.int1:
            return None
        axes = [k for k, n in enumerate(ptr.shape) if n > 1] or [len(ptr.shape) - 1]
        for a in reversed(axes if transposed_ok else axes[-1:]):
            if index_step(ptr, a, narrow_int64=True) == 1:   # int64 offsets: low 32 bits (plan/narrow.py)
                return a
        return None

    def _open_rows(self, shape, axis) -> tuple[tuple[str, ...], int]:
        """Loops over every axis but `axis`; returns the index (with `axis` at 0) and the loop count."""
        idx, opened = [], 0
        for k, n in enumerate(shape):
            if k == axis or n == 1:
                idx.append("0")
                continue
            self.emit(f"for (int r{k} = 0; r{k} < {n}; ++r{k}) {{")
            self.indent += 1
            idx.append(f"r{k}")
            opened += 1
        return tuple(idx), opened

    def _close(self, opened: int) -> None:
        for _ in range(opened):
            self.indent -= 1
            self.emit("}")

    def _at(self, v, idx) -> str:
        """Element `idx` of `v`, its temporaries emitted here."""
        nest = Nest(idx)
        e = self.ev(v, idx, nest)
        for st in nest.stmts:
            self.emit(st)
        return e

    def _dma_in(self, dt, src: str, dst: str, n: str, widen: bool = False) -> str:
        d = self.d
        if d.same_repr(dt):
            return f"GM2LM({src}, {dst}, ({n}) * (int)sizeof({d.mem_type(dt)}));"
        vector = "_vector" if widen and self._widens(dt) else ""
        return f"tj_gm2lm_{d.dma_suffix[dt]}{vector}({src}, {dst}, {n});"

    def _widens(self, dt) -> bool:
        """Whether whole rows of `dt` are widened with vector loads (fp16 on xpu3: the vector unit
        writes the run too, so the copy's group declares it). Masked runs and transposed tiles,
        which scalar code touches in the same loop, keep the scalar widening."""
        return dt is D.float16 and self.vector_f16

    def _dma_async(self, kind: str, dt):
        """The `_copy_rows` batch form of a plain (same-representation) DMA, or None."""
        if not self.async_dma or not self.d.same_repr(dt):
            return None
        size = f"(int)sizeof({self.d.mem_type(dt)})"
        if kind == "GM2LM":
            return lambda gm, row, start, n: f"GM2LM_ASYNC({gm}, {self._lm_at(row, start)}, ({n}) * {size});"
        return lambda gm, row, start, n: f"LM2GM_ASYNC({self._lm_at(row, start)}, {gm}, ({n}) * {size});"

    def _dma_out(self, dt, src: str, dst: str, n: str) -> str:
        d = self.d
        if d.same_repr(dt):
            return f"LM2GM({src}, {dst}, ({n}) * (int)sizeof({d.mem_type(dt)}));"
        return f"tj_lm2gm_{d.dma_suffix[dt]}({src}, {dst}, {n});"   # narrows the LM run in place

    def _copy_rows(self, shape, axis, ptr, mask, buf: str, copy, fill_other=None, dma=("GM2LM", 4),
                   engine=None, engine_whole_rows=None, batch=None, prefetch=False) -> None:
        """One `copy(gm, row, start, count)` per contiguous GM segment along `axis`: elements
        start..start+count-1 of the LM row whose first element is `row` (LM stride: the product of
        the later axes). Masked-off elements are skipped (loads put `other` there): a row is split
        into runs of true mask elements. `engine`: the buffers the DMA engine reads or writes
        (access.py), {name: ("D", written)}; `engine_whole_rows` instead where no row is masked.
        `batch`: the asynchronous form of `copy` (a plain DMA); where no row is masked and there is
        more than one, every row is issued with it and one `mfence()` waits for them all; with
        `prefetch` (a tile for the next loop iteration) every unmasked tile is a batch and the
        `mfence()` that ends the loop body waits for it (prefetch.py)."""
        width = shape[axis]
        lm_step = 1
        for n in shape[axis + 1:]:
            lm_step *= n

        def at(row, j):
            return f"{row}[{j}]" if lm_step == 1 else f"{row}[({j}) * {lm_step}]"

        def rows(masked: bool):
            self.begin_group(engine if masked or engine_whole_rows is None else engine_whole_rows)
            idx0, opened = self._open_rows(shape, axis)
            p0 = self._at(ptr, idx0)
            base = self.linear(idx0, shape)
            row = f"({buf} + {base})" if base != "0" else buf
            batched = False
            if not masked:
                rows_n = 1
                for k, n in enumerate(shape):
                    rows_n *= n if k != axis else 1
                batched = batch is not None and (rows_n > 1 or prefetch)
                self.record_dma(dma[0], buf, dma[1], width, rows_n, batched=batched, prefetch=prefetch)
                self.emit((batch if batched else copy)(p0, row, "0", str(width)))
            else:
                idx_j = tuple("j" if k == axis else i for k, i in enumerate(idx0))
                self.emit("{")
                self.indent += 1
                self.emit("int s_ = -1;")
                self.emit(f"for (int j = 0; j <= {width}; ++j) {{")
                self.indent += 1
                self.emit("bool m_ = false;")
                self.emit(f"if (j < {width}) {{")
                self.indent += 1
                self.emit(f"m_ = {self._at(mask, idx_j)};")
                self.indent -= 1
                self.emit("}")
                self.emit("if (m_) { if (s_ < 0) s_ = j; continue; }")
                self.emit(f"if (s_ >= 0) {{ {copy(f'{p0} + s_', row, 's_', 'j - s_')} s_ = -1; }}")
                if fill_other is not None:
                    self.emit(f"if (j < {width}) {{")
                    self.indent += 1
                    self.emit(f"{at(row, 'j')} = {fill_other(idx_j)};")
                    self.indent -= 1
                    self.emit("}")
                self.indent -= 1
                self.emit("}")
                self.indent -= 1
                self.emit("}")
            self._close(opened)
            if batched and not prefetch:
                self.emit_full_fence("waits for an asynchronous DMA batch")

        self._masked_or_fast(mask, rows)

    @staticmethod
    def _lm_at(row: str, start: str) -> str:
        return row if start == "0" else f"{row} + {start}"

    def emit_site(self, op: Op) -> None:
        """Names the load or store the DMA calls that follow serve (its op's index in the IR): the
        host emulation's bounds error reports it (runtime/sites.py); nothing on the device."""
        self.emit(f"TJ_SITE({self.op_index[id(op)]});")

    def emit_load(self, op: Op) -> None:
        v = op.results[0]
        ptr, mask, other = (op.operands + [None, None])[:3]
        self.dma_pointer = ptr
        if v.type.is_scalar:
            self.emit_site(op)
            name = self.name(v)
            self.emit(f"{self.d.reg_type(v.dtype)} {name};")
            copy = self._gm2lm(v.dtype, self.ev(ptr, (), None), name)
            self.record_dma("GM2LM", name, self.d.elem_bytes(v.dtype), 1, 1)
            if mask is None:
                self.emit(copy)
            else:
                self.emit(f"if ({self.ev(mask, (), None)}) {copy} else {name} = {self.ev(other, (), None)};")
            return
        if self.take_prefetched(op):
            return
        name = self.declare_buffer(v)
        if id(op) in self.staged:
            self._staged_load(op, name)
        else:
            self._load_into(op, name)

    @property
    def sm_bytes(self) -> int:
        return sum(n for _, _, n in self.sm_slots)

    def _staged_load(self, op: Op, name: str) -> None:
        """A tile every program of a team reads (plan/staging.py): when the kernel runs in teams
        (`tj_team` > 1), the leader loads it as usual and copies it into the team's SM slot, the
        others copy it from there between two cluster barriers (the first keeps the slot until its
        previous readers are done). Every core reaches both barriers, whatever its role."""
        if id(op) not in self._slot_of:
            self._slot_of[id(op)] = (self.sm_bytes, align(self.requests[-1].nbytes))
            self.sm_slots.append((name, *self._slot_of[id(op)]))
        slot, nbytes = self._slot_of[id(op)]

        def lead():
            self._load_into(op, name)
            self.begin_group({name: ("V", False)})
            self.emit(f"if (tj_team > 1) tj_lm2sm({name}, tj_sm + {slot}, {nbytes});")

        self.emit("if (tj_team > 1) sync_cluster();")
        self._guarded(f"tj_leader && {self._team_iteration}" if self._shadowing else "tj_leader", lead, shared=True)
        self.emit("if (tj_team > 1) sync_cluster();")

        def take():
            self.begin_group({name: ("V", True)})
            self.emit(f"tj_sm2lm(tj_sm + {slot}, {name}, {nbytes});")
        if not self._shadowing:   # a shadow iteration's tile is for the others only
            self._guarded("!tj_leader", take)

    # -- shadowed loops (plan/staging.py): run to the cluster's longest trip count ------------------
    def loop_trip_count(self, op: Op, trip: str, ctype: str) -> str:
        if id(op) not in self.shadowed:
            return trip
        n, team = self.fresh("n"), self.fresh("team_trips")
        self.emit(f"int {team} = {trip};   // the longest of this team: its leader loads no further")
        self.emit(f"const {ctype} {n} = tj_team > 1 ? tj_cluster_max({trip}, tj_votes, tj_team, &{team}) : {trip};")
        self._shadow_of[id(op.blocks[0])] = (op, team)
        return n

    def lower_block(self, block) -> None:
        shadowed = self._shadow_of.get(id(block))
        if shadowed is None:
            super().lower_block(block)
            return
        loop, team = shadowed
        iv, (lb, ub, st) = self.name(block.args[0]), (self.ev(v, (), None) for v in loop.operands[:3])
        # iteration iv is this program's own while iv < ub (a positive step): the body as written;
        # past it, the shadow: the staged loads' barriers, and the leader's loads while a program
        # of its team still runs (beyond, another team's trip count: a tile nobody here reads)
        self.flow_open("branch", f"if ({iv} < {ub}) {{")
        self._scoped(lambda: super(KunlunLowering, self).lower_block(block))
        self.flow_next_branch("} else {")
        need = set().union(*(shadow_slice(block, o) for o in walk_block(block) if id(o) in self.staged))
        was, self._team_iteration = self._team_iteration, f"{iv} < {lb} + {team} * {st}"
        try:
            self._scoped(lambda: self._shadow(block, need))
        finally:
            self._team_iteration = was
        self.flow_close("}")

    def _scoped(self, body) -> None:
        self.indent += 1
        self.flag_scopes.append({})
        try:
            body()
        finally:
            self.flag_scopes.pop()
            self.indent -= 1

    def _shadow(self, block, need: set[int]) -> None:
        """`block` of a shadowed loop's body with only its staged loads, the ops their operands
        `need`, and the loops around them."""
        was, self._shadowing = self._shadowing, True
        try:
            for op in block.ops:
                if id(op) in self.staged:
                    self.lower_op(op)
                elif op.name == FOR and any(id(o) in self.staged for o in walk_block(op.blocks[0])):
                    self._shadow_loop(op, need)
                elif id(op) in need:
                    self.lower_op(op)
        finally:
            self._shadowing = was

    def _shadow_loop(self, op: Op, need: set[int]) -> None:
        """A loop of the body around staged loads, without its carried values."""
        self.open_for(op, *(self.ev(v, (), None) for v in op.operands[:3]))
        self.loop_trips.append(self.static_trips(op))
        try:
            self._scoped(lambda: self._shadow(op.blocks[0], need))
        finally:
            self.loop_trips.pop()
        self.flow_close("}")

    def declare_buffer(self, v, name=None) -> str:
        if self._shadowing and id(v) in self.buffers:   # the body's buffer: free in a shadow iteration
            return self.redeclare(self.names[id(v)])
        return super().declare_buffer(v, name)

    def _guarded(self, cond: str, body, shared: bool = False) -> None:
        """`if (cond) { body() }`, its all-true flags scoped to the branch; DMA recorded in it is
        `shared` (moved once per team)."""
        self.flow_open("branch", f"if ({cond}) {{")
        was, self._sharing = self._sharing, shared or self._sharing
        try:
            self._scoped(body)
        finally:
            self._sharing = was
        self.flow_close("}")

    def _load_into(self, op: Op, name: str, prefetch: bool = False) -> None:
        self.emit_site(op)
        v = op.results[0]
        ptr, mask, other = (op.operands + [None, None])[:3]
        self.dma_pointer = ptr
        axis = self._row_axis(ptr, transposed_ok=True)
        if axis is not None:
            zero = self.d.literal(0, v.dtype)
            if all(n == 1 for n in v.shape[axis + 1:]):
                def copy(gm, row, start, n):
                    return self._dma_in(v.dtype, gm, self._lm_at(row, start), n, widen=start == "0")
            else:
                # contiguous in GM down a column of the LM tile: DMA the segment into a row
                # buffer, then spread it with the tile's stride (an LM-to-LM copy)
                lm_step = 1
                for n_ in v.shape[axis + 1:]:
                    lm_step *= n_
                tr = self.local_buffer(self.d.reg_type(v.dtype), self.fresh("tr"), v.shape[axis], v)

                def copy(gm, row, start, n, tr=tr, lm_step=lm_step):
                    return (f"{self._dma_in(v.dtype, gm, tr, n)} for (int t_ = 0; t_ < {n}; ++t_) "
                            f"{row}[({start} + t_) * {lm_step}] = {tr}[t_];")
            rowwise = all(n == 1 for n in v.shape[axis + 1:])
            landing = name if rowwise else tr   # the DMA's destination
            batch = self._dma_async("GM2LM", v.dtype) if rowwise else None
            if prefetch and not self.d.same_repr(v.dtype):
                batch = self.raw_rows_async(v.dtype)   # widened where the next iteration takes it
            self._copy_rows(v.shape, axis, ptr, mask, name, copy,
                            fill_other=lambda idx: zero if other is None else self._at(other, idx),
                            dma=("GM2LM", self.d.elem_bytes(v.dtype)), engine={landing: ("D", True)},
                            engine_whole_rows={name: ("DV", True)} if rowwise and self._widens(v.dtype) else None,
                            batch=batch, prefetch=prefetch)
            return

        def fill(masked: bool):
            # fallback: one element per GM2LM (gathers, strided tiles)
            self.begin_group({name: ("D", True)})
            if not masked:
                self.record_dma("GM2LM", name, self.d.elem_bytes(v.dtype), 1, v.type.numel)
            nest = self.open_nest(v.shape, simd=False)
            dst = f"{name}[{self.linear(nest.idx, v.shape)}]"
            copy = self._gm2lm(v.dtype, self.ev(ptr, nest.idx, nest), dst)
            if masked:
                m = self.ev(mask, nest.idx, nest)
                o = self.ev(other, nest.idx, nest) if other is not None else self.d.literal(0, v.dtype)
                copy = f"if ({m}) {copy} else {dst} = {o};"
            self.close_nest(nest, [copy])

        self._masked_or_fast(mask, fill)

    def emit_store(self, op: Op) -> None:
        if self.staged:   # a team's ghost programs (tj_live false) store nothing
            self._guarded("tj_live", lambda: self._store(op))
        else:
            self._store(op)

    def _store(self, op: Op) -> None:
        self.emit_site(op)
        ptr, val = op.operands[:2]
        self.dma_pointer = ptr
        mask = op.operands[2] if len(op.operands) > 2 else None
        if ptr.type.is_scalar:
            s = self._lm2gm(val.dtype, self.ev(ptr, (), None), self.ev(val, (), None))
            self.record_dma("LM2GM", "", self.d.elem_bytes(val.dtype), 1, 1)
            self.emit(s if mask is None else f"if ({self.ev(mask, (), None)}) {s}")
            return
        axis = self._row_axis(ptr)
        if axis is not None:
            if id(val) in self.buffers and val.shape == ptr.shape and self.d.same_repr(val.dtype):
                src = self.name(val)   # already in LM, in the memory format: DMA straight from it
            else:
                src = self._as_staging(val, ptr.shape)
            # a narrowing copy converts the LM run in place before the DMA reads it
            self._copy_rows(ptr.shape, axis, ptr, mask, src,
                            lambda gm, row, start, n: self._dma_out(val.dtype, self._lm_at(row, start), gm, n),
                            dma=("LM2GM", self.d.elem_bytes(val.dtype)),
                            engine={src: ("D", not self.d.same_repr(val.dtype))},
                            batch=self._dma_async("LM2GM", val.dtype))
            return

        def fill(masked: bool):
            self.begin_group()
            if not masked:
                self.record_dma("LM2GM", "", self.d.elem_bytes(val.dtype), 1, ptr.type.numel)
            nest = self.open_nest(ptr.shape, simd=False)
            s = self._lm2gm(val.dtype, self.ev(ptr, nest.idx, nest), self.ev(val, nest.idx, nest))
            if masked:
                s = f"if ({self.ev(mask, nest.idx, nest)}) {s}"
            self.close_nest(nest, [s])

        self._masked_or_fast(mask, fill)

    def _as_staging(self, val, shape) -> str:
        """An LM buffer holding `val` for LM2GM (narrowing to fp16/bf16 is done in place, so it is
        never `val`'s own buffer unless `val` dies here)."""
        self.allow_in_place(val)
        name = self.local_buffer(self.d.reg_type(val.dtype), self.fresh("st"), val.type.numel, val)
        vec = simd.vector_form(self, val) if self.vectorize and val.shape == tuple(shape) else None
        if vec is not None:
            simd.vector_nest(self, val.shape, name, vec)
            return name
        self.begin_group()
        nest = self.open_nest(shape)
        e = self.ev(val, nest.idx, nest)
        self.close_nest(nest, [f"{name}[{self.linear(nest.idx, shape)}] = {e};"])
        return name
