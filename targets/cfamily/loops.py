"""Control flow of the C-family lowering (a mixin of CLowering): run-time `for` and `while` loops
with carried values (the two-phase copy of yielded values into the carried slots), and `if` on a
scalar with results (declared before the C `if`, assigned by each branch's yield)."""
from __future__ import annotations

from compiler.ir import Op, Value
from compiler.ir.ops import CONST, LOAD, OPS


class LoopLowering:
    def _carried_slots(self, args, carried, results, also=()) -> None:
        """Declares one C variable (scalars) or local buffer (tiles) per carried value, initialised;
        the block arguments in `args` (and in each list of `also`) and the results name it."""
        for k, (arg, init, res) in enumerate(zip(args, carried, results)):
            if arg.type.is_scalar:
                n = self.fresh("c")
                self.emit(f"{self.d.reg_type(arg.dtype)} {n} = {self.ev(init, (), None)};")
                self.names[id(arg)] = n
            else:
                n = self.declare_buffer(arg, self.fresh("c"))
                nest = self.open_nest(arg.shape)
                self.close_nest(nest, [f"{n}[{self.linear(nest.idx, arg.shape)}] = {self.ev(init, nest.idx, nest)};"])
            self.names[id(res)] = n
            for other in also:
                self.names[id(other[k])] = n
                if not other[k].type.is_scalar:
                    self.buffers.add(id(other[k]))
            if not res.type.is_scalar:
                self.buffers.add(id(res))

    def _in_region(self, kind: str, values, block) -> None:
        self.regions.append((kind, values))
        if kind == "loop":
            self.loop_stack.append(values)
        self.flag_scopes.append({})
        self.indent += 1
        try:
            self.lower_block(block)
        finally:
            self.indent -= 1
            self.flag_scopes.pop()
            if kind == "loop":
                self.loop_stack.pop()
            self.regions.pop()

    def op_for(self, op: Op) -> None:
        body = op.blocks[0]
        bounds = tuple(self.ev(v, (), None) for v in op.operands[:3])
        self._carried_slots(body.args[1:], op.operands[3:], op.results)
        self.loop_heads.append([len(self.lines), self.indent])
        self.open_for(op, *bounds)
        self._in_region("loop", body.args[1:], body)
        self.loop_heads.pop()
        self.flow_close("}")

    def open_for(self, op: Op, lb: str, ub: str, st: str) -> tuple[str, str]:
        """The C `for` over a `for` op's trip count, up to its body's first line (the iv); returns
        the C names of the iteration counter and of the trip count."""
        iv = op.blocks[0].args[0]
        ivt = self.d.reg_type(iv.dtype)
        trip = self.fresh("n")
        k = self.fresh("k")
        step_op = op.operands[2].owner
        if self.d.zero_step_check is not None and (step_op is None or step_op.name != CONST):
            self.emit(self.d.zero_step_check.format(step=st, site=self.op_index[id(op)]))
        tt = self.d.trip_count_type or ivt   # a count wider than the index: an int32 span can exceed int32
        self.emit(f"const {tt} {trip} = tj_trip_count<{ivt}>({lb}, {ub}, {st});")
        trip = self.loop_trip_count(op, trip, tt)
        self.flow_open("loop", f"for ({tt} {k} = 0; {k} < {trip}; ++{k}) {{")
        iv_expr = f"{lb} + {k} * {st}" if tt == ivt else f"({ivt})({lb} + ({ivt}){k} * {st})"
        self.emit(f"    const {ivt} {self.name(iv)} = {iv_expr};")
        return k, trip

    def loop_trip_count(self, op: Op, trip: str, ctype: str) -> str:
        """The C name of the trip count a `for` runs (kunlun's shadowed loops run longer)."""
        return trip

    def op_while(self, op: Op) -> None:
        """`while (true) { condition block; if (!c) break; body; copy into the carried slots }`;
        both blocks' arguments and the results name the same slots."""
        cond, body = op.blocks
        self._carried_slots(cond.args, op.operands, op.results, also=(body.args,))
        self.loop_heads.append([len(self.lines), self.indent])
        self.flow_open("loop", "while (true) {")
        self.regions.append(("cond", []))
        self.flag_scopes.append({})
        self.indent += 1
        self.lower_block(cond)
        self.indent -= 1
        self.flag_scopes.pop()
        self.regions.pop()
        self._in_region("loop", body.args, body)
        self.loop_heads.pop()
        self.flow_close("}")

    def declare_before_loop(self, line: str) -> None:
        """Emits `line` just before the innermost run-time loop being lowered: state that lives
        across its iterations."""
        head = self.loop_heads[-1]
        self.lines.insert(head[0], "    " * head[1] + line)
        head[0] += 1

    def op_if(self, op: Op) -> None:
        """`T r; if (c) { ...; r = a; } else { ...; r = b; }`: tile results are local buffers."""
        for r in op.results:
            if r.type.is_scalar:
                n = self.fresh("r")
                self.emit(f"{self.d.reg_type(r.dtype)} {n};")
                self.names[id(r)] = n
            else:
                self.declare_buffer(r, self.fresh("r"))
        self.flow_open("branch", f"if ({self.ev(op.operands[0], (), None)}) {{")
        self._in_region("if", op.results, op.blocks[0])
        self.flow_next_branch("} else {")
        self._in_region("if", op.results, op.blocks[1])
        self.flow_close("}")

    def op_yield(self, op: Op) -> None:
        kind, values = self.regions[-1]
        if kind == "cond":
            self.emit(f"if (!({self.ev(op.operands[0], (), None)})) break;")
            return
        if kind == "if":
            for val, res in zip(op.operands, values):
                if res.type.is_scalar:
                    self.emit(f"{self.name(res)} = {self.ev(val, (), None)};")
            # the branch's results are fresh arrays no yielded value reads: filled in one nest per shape
            self.fill_together([(self.name(res), val) for val, res in zip(op.operands, values) if not res.type.is_scalar])
            return
        loop_args = values
        arg_ids = {id(a) for a in loop_args}
        reads = [self._carried_reads(v, arg_ids) if not v.type.is_scalar else {} for v in op.operands]
        # a tile expression that reads no carried value but its own slot, element by element, is
        # written straight into that slot, if no other yielded value reads the slot
        in_place = []
        for i, (val, arg) in enumerate(zip(op.operands, loop_args)):
            ok = not val.type.is_scalar and id(val) not in self.buffers and val is not arg \
                and set(reads[i]) <= {id(arg)} and all(reads[i].values()) \
                and not any(id(arg) in r for j, r in enumerate(reads) if j != i)
            in_place.append(ok)
        for val, arg, ok in zip(op.operands, loop_args, in_place):
            if ok:
                self.update_in_place(arg, val)
        # phase 1: everything else that is not a stable buffer is computed into a temporary, so no
        # carried value is overwritten while another yielded value still reads it
        staged, temporaries = [], []
        for val, arg, ok in zip(op.operands, loop_args, in_place):
            if val is arg or ok:
                staged.append(None)
            elif val.type.is_scalar:
                t = self.fresh("y")
                self.emit(f"{self.d.reg_type(val.dtype)} const {t} = {self.ev(val, (), None)};")
                staged.append(t)
            elif id(val) in arg_ids and self._overwritten(val, op.operands, loop_args):
                # another slot's value (`a, b = b, a`): phase 2 overwrites that slot, so a copy is read
                staged.append(self.temporary(val))
                self.emit(f"{self.d.copy_buffer(staged[-1], self.name(val), val.type.numel, self.d.reg_type(val.dtype))};")
            elif id(val) in self.buffers or id(val) in arg_ids:
                staged.append(self.name(val))
            else:   # an expression: computed with the others of its shape (fill_together)
                staged.append(self.temporary(val))
                temporaries.append((staged[-1], val))
        self.fill_together(temporaries)
        # phase 2: copy into the carried slots
        for src, arg in zip(staged, loop_args):
            if src is None or src == self.name(arg):   # unchanged, or updated in place
                continue
            dst = self.name(arg)
            if arg.type.is_scalar:
                self.emit(f"{dst} = {src};")
            else:
                self.emit(f"{self.d.copy_buffer(dst, src, arg.type.numel, self.d.reg_type(arg.dtype))};")

    @staticmethod
    def _overwritten(slot: Value, yielded: list[Value], loop_args: list[Value]) -> bool:
        """Whether carried `slot` gets a new value at this yield (it is not yielded as itself)."""
        return next(v for v, a in zip(yielded, loop_args) if a is slot) is not slot

    def update_in_place(self, arg: Value, val: Value) -> None:
        """Writes `val` element by element into the carried slot `arg`, which it reads only at the
        element being written (acc += x)."""
        def fill(masked: bool):
            nest = self.open_nest(arg.shape)
            e = self.ev(val, nest.idx, nest)
            self.close_nest(nest, [f"{self.name(arg)}[{self.linear(nest.idx, arg.shape)}] = {e};"])
        self._masked_or_fast(self._fused_load_mask(val), fill)

    def _fused_load_mask(self, v: Value) -> Value | None:
        """The mask shared by every masked load fused into `v`'s per-element expression (at the
        same index as `v`), or None. A nest evaluating `v` can then take an unmasked fast path."""
        reached = self.read_at_same_index(v)
        if reached is None:   # a view changes the index: a load's mask is not at v's index
            return None
        masks = {id(x.owner.operands[1]): x.owner.operands[1] for x in reached
                 if x.owner.name == LOAD and len(x.owner.operands) > 1}
        found = next(iter(masks.values()), None)
        return found if len(masks) == 1 and found.shape == v.shape else None

    def read_at_same_index(self, v: Value, stop: Value | None = None) -> list[Value] | None:
        """The tiles `v`'s per-element expression reads at v's own index: v and the inlined
        elementwise ops under it, down to loads (whose pointers and masks are not followed),
        buffers and `stop` (reached but not followed); scalars broadcast to a tile (x - mean) read
        no tile. None when a view that changes the index is in the way."""
        reached, stack, seen = [], [v], set()
        while stack:
            x = stack.pop()
            if id(x) in seen or x.type.is_scalar or id(x) in self.buffers or x.owner is None:
                continue
            seen.add(id(x))
            reached.append(x)
            if x is stop or x.owner.name == LOAD:
                continue
            kind = OPS[x.owner.name].kind
            if kind == "elementwise":
                stack.extend(x.owner.operands)
            elif kind == "view" and not all(o.type.is_scalar for o in x.owner.operands):
                return None
        return reached

    def _carried_reads(self, v: Value, arg_ids: set[int]) -> dict[int, bool]:
        """Carried values that evaluating `v` per element reads: id -> read only at the same index.
        Stops at buffers already computed; any view on the way makes the access non-identity."""
        out: dict[int, bool] = {}
        stack = [(v, True)]
        seen = set()
        while stack:
            x, ident = stack.pop()
            if (id(x), ident) in seen:
                continue
            seen.add((id(x), ident))
            if id(x) in arg_ids:
                out[id(x)] = out.get(id(x), True) and ident
                continue
            if x.type.is_scalar or id(x) in self.buffers or x.owner is None:
                continue
            kind = OPS[x.owner.name].kind
            if kind in ("elementwise", "view") or x.owner.name == LOAD:   # fused loads read their pointers
                for o in x.owner.operands:
                    stack.append((o, ident and kind != "view"))
        return out
