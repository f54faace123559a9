"""The region scheduler of the strip-mining rewrite (stripmine.py describes it): which pass each op
of a block runs in, and the chunk loops that run the passes. `stripmine` is the rewrite's entry."""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Block, Function, Op, TileType, Value
from compiler.ir.ops import FOR, IF, LOAD, OPS, STORE, YIELD

from . import carried, trees
from .dims import Dims
from .rebuild import COMBINE, Emitter, chunked, clone_chunked, identity
from .stripmine import Ctx, NotApplicable, bases


def external_refs(op: Op) -> list[Value]:
    """Values `op` reads (its operands and, inside its blocks, values defined outside it)."""
    inside, out, seen = set(), [], set()

    def walk(o: Op):
        for v in o.operands:
            if id(v) not in inside and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        for b in o.blocks:
            inside.update(id(a) for a in b.args)
            for x in b.ops:
                walk(x)
                inside.update(id(r) for r in x.results)

    walk(op)
    return out


def _memory(op: Op) -> tuple[set[int], set[int]]:
    """(bases loaded, bases stored) by `op`, nested ops included."""
    ld, st = set(), set()
    if op.name == LOAD:
        ld |= bases(op.operands[0])
    elif op.name == STORE:
        st |= bases(op.operands[0])
    for b in op.blocks:
        for o in b.ops:
            a, s = _memory(o)
            ld |= a
            st |= s
    return ld, st


class Scope:
    """Chunk values (`dmap`) and plain values (`fmap`) of one pass, or of a loop body inside it."""

    def __init__(self, region: Region, em: Emitter, offset: Value, iteration: Value, parent=None):
        self.region, self.em, self.offset, self.iteration, self.parent = region, em, offset, iteration, parent
        self.dmap: dict[int, Value] = {}
        self.fmap: dict[int, Value] = {}
        self.root_index = 0   # the root op being emitted (for memory-order checks)

    def top(self) -> Scope:
        s = self
        while s.parent is not None:
            s = s.parent
        return s

    def chunk(self, v: Value) -> Value | None:
        s = self
        while s is not None:
            if id(v) in s.dmap:
                return s.dmap[id(v)]
            s = s.parent
        return None

    def plain(self, v: Value) -> Value:
        s = self
        while s is not None:
            if id(v) in s.fmap:
                return s.fmap[id(v)]
            s = s.parent
        return self.region.free(v)


class Region:
    def __init__(self, ctx: Ctx, block: Block, out: Block, vmap: dict[int, Value], parent: Region | None):
        self.ctx, self.block, self.out, self.vmap, self.parent = ctx, block, out, vmap, parent
        self.ops = block.ops
        self.index = {id(op): i for i, op in enumerate(self.ops)}
        self.defined = {id(r): i for i, op in enumerate(self.ops) for r in op.results}
        self.roles = [ctx.role(op) if ctx.touches(op) else "free" for op in self.ops]
        self.pulls: list[tuple[int, int, int]] = []    # (load op index, pass, demanding root index)

    # -- values ------------------------------------------------------------------------------------
    def free(self, v: Value) -> Value:
        r = self
        while r is not None:
            x = r.vmap.get(id(v))
            if x is not None:
                return x
            r = r.parent
        raise NotApplicable(f"internal: no value for {v} outside the chunk loops")

    def local_op(self, v: Value) -> Op | None:
        i = self.defined.get(id(v))
        return self.ops[i] if i is not None else None

    # -- schedule ----------------------------------------------------------------------------------
    def schedule(self) -> None:
        bump: dict[int, int] = {}
        while True:
            self._schedule(bump)
            conflict = False
            for p in set(self.pass_.values()):
                ops = [i for i, q in self.pass_.items() if q == p]
                if any(self.roles[i] == "red" and self.ops[i].attrs.get("order") == "pairwise" for i in ops):
                    for i in ops:   # a strict tree walks chunks in bit-reversed order; a dot, a scan
                        if self.roles[i] in ("con", "scan", "arg"):   # and an arg-reduction ascending
                            bump[i] = p + 1
                            conflict = True
                elif any(self.roles[i] in ("red", "con", "arg") or self._scan(i) is False for i in ops):
                    for i in ops:   # a reverse scan descending: in a pass of reverse scans only
                        if self._scan(i):
                            bump[i] = p + 1
                            conflict = True
            if not conflict:
                return

    def _scan(self, i: int) -> bool | None:
        """Whether op `i` is a reverse scan (its pass walks the chunks from the last); None: no scan."""
        return bool(self.ops[i].attrs.get("reverse")) if self.roles[i] == "scan" else None

    def _schedule(self, bump: dict[int, int]) -> None:
        self.ready: dict[int, int] = {}     # value id -> the first pass (or gap) that can use it
        self.gap: dict[int, int] = {}
        self.pass_: dict[int, int] = {}
        last_store = 0
        for i, op in enumerate(self.ops):
            lo = bump.get(i, 0)
            for v in external_refs(op):
                lo = max(lo, self.ready.get(id(v), 0))
            role = self.roles[i]
            stores = _memory(op)[1]
            if stores:   # stores keep their program order
                lo = max(lo, (last_store + (0 if role in ("free", "inner") else -1) + 1) // 2)
            if role in ("free", "inner"):
                self.gap[i] = lo
                pos = 2 * lo
                for r in op.results:
                    self.ready[id(r)] = lo
            else:
                exports = role == "loop" and any(not self.ctx.has(r) for r in op.results)
                if role in ("red", "con", "scan", "arg", "store") or exports or (role == "loop" and stores):
                    self.pass_[i] = lo
                pos = 2 * lo + 1
                for r in op.results:
                    self.ready[id(r)] = lo if self.ctx.has(r) else lo + 1
            if stores:
                last_store = max(last_store, pos)

    # -- emission ----------------------------------------------------------------------------------
    def run(self) -> None:
        self.schedule()
        n_pass = 1 + max(self.pass_.values(), default=-1)
        tail = self.ops[-1] if self.ops and self.ops[-1].name == YIELD else None
        for g in range(n_pass + 1):
            for i, op in enumerate(self.ops):
                if self.gap.get(i) == g and op is not tail:
                    self.emit_free(op)
            if g < n_pass:
                self.emit_pass(g)
        if tail is not None:
            Emitter(self.out, tail.loc).op("yield", [self.free(v) for v in tail.operands])
        self.check_memory_order()

    def emit_free(self, op: Op) -> None:
        em = Emitter(self.out, op.loc)
        if self.roles[self.index[id(op)]] == "inner":   # each block a region of its own
            blocks = []
            for b in op.blocks:
                args = [Value(a.type, a.loc) for a in b.args]
                nb = Block(args)
                Region(self.ctx, b, nb, {id(a): n for a, n in zip(b.args, args)}, parent=self).run()
                blocks.append(nb)
            new = em.op(op.name, [self.free(v) for v in op.operands], dict(op.attrs), blocks)
        else:
            new = clone_plain(em, op, self.free)
        for r, n in zip(op.results, new.results):
            self.vmap[id(r)] = n

    def emit_pass(self, p: int) -> None:
        ctx = self.ctx
        roots = [i for i in range(len(self.ops)) if self.pass_.get(i) == p]
        bitrev = any(self.roles[i] == "red" and self.ops[i].attrs.get("order") == "pairwise" for i in roots)
        outer = Emitter(self.out, self.ops[roots[0]].loc)
        inits, slots = [], []
        for i in roots:
            inits_i = self.carried_inits(i, outer)
            slots.append((len(inits), len(inits_i)))
            inits += inits_i
        body = Block([Value(TileType(D.int32))] + [Value(v.type) for v in inits])
        em = Emitter(body, outer.loc)
        it = body.args[0]
        if bitrev:
            first = trees.bit_reversed(em, it, trees.levels(ctx.n))
        elif any(self._scan(i) for i in roots):   # reverse scans only (schedule): the last chunk first
            first = em.v("sub", [em.i32(ctx.n - 1), it])
        else:
            first = it
        offset = em.v("mul", [first, em.i32(ctx.size)])
        scope = Scope(self, em, offset, it)
        updates = []
        for i, (start, count) in zip(roots, slots):
            scope.root_index = i
            em.loc = self.ops[i].loc
            updates += self.emit_root(i, scope, body.args[1 + start:1 + start + count])
        em.op("yield", updates)
        loop = outer.op("for", [outer.i32(0), outer.i32(ctx.n), outer.i32(1)] + inits, {}, [body])
        for i, (start, count) in zip(roots, slots):
            self.finish_root(i, loop.results[start:start + count], outer)

    def carried_inits(self, i: int, em: Emitter) -> list[Value]:
        op, role = self.ops[i], self.roles[i]
        if role == "red":
            if op.attrs.get("order") == "pairwise":
                x = op.operands[0]
                return trees.slot_inits(em, op, chunked(x.type, self.ctx.axis(x), self.ctx.size), self.ctx.n)
            r = op.results[0]
            return [em.const(identity(op.attrs["kind"], r.dtype), r.dtype, r.shape)]
        if role == "con":
            return [self.free(op.operands[2])]
        if role == "scan":
            return [carried.scan_init(em, op)]
        if role == "arg":
            return carried.arg_inits(em, op)
        if role == "loop" and op.name == IF:   # what it yields without the axis is the same every chunk
            return [em.const(False if r.dtype.is_bool() else 0, r.dtype, r.shape) for r in op.results
                    if not self.ctx.has(r)]
        if role == "loop":
            return [self.free(init) for init, r in zip(op.operands[3:], op.results) if not self.ctx.has(r)]
        return []

    def emit_root(self, i: int, scope: Scope, args) -> list[Value]:
        op, role, em = self.ops[i], self.roles[i], scope.em
        if role == "store":
            em.op("store", [self.operand(v, scope) for v in op.operands])
            return []
        if role == "red":
            x = self.pull(op.operands[0], scope)
            if op.attrs.get("order") == "pairwise":
                return trees.push_chunk(em, op, x, list(args), scope.iteration)
            part = em.v("reduce", [x], dict(op.attrs))
            return [em.v(COMBINE[op.attrs["kind"]], [args[0], part])]
        if role == "con":
            a, b = (self.pull(v, scope) for v in op.operands[:2])
            return [em.v("dot", [a, b, args[0]], dict(op.attrs))]
        if role == "scan":   # its chunk serves the rest of this pass
            out, nxt = carried.scan_chunk(em, op, self.pull(op.operands[0], scope), args[0])
            scope.dmap[id(op.results[0])] = out
            return [nxt]
        if role == "arg":
            return carried.arg_chunk(em, op, self.pull(op.operands[0], scope), list(args), scope.offset,
                                     scope.iteration)
        new = self.rebuild_loop(op, scope)   # a loop with stores or results that have no chunked axis
        return [n for r, n in zip(op.results, new.results) if not self.ctx.has(r)]

    def finish_root(self, i: int, results, em: Emitter) -> None:
        op, role = self.ops[i], self.roles[i]
        em.loc = op.loc
        if role == "red":
            out = results[0] if op.attrs.get("order") != "pairwise" else \
                trees.finish(em, op, list(results), op.attrs["axis"])
            self.vmap[id(op.results[0])] = out
        elif role == "con":
            self.vmap[id(op.results[0])] = results[0]
        elif role == "arg":
            for r, n in zip(op.results, results):
                self.vmap[id(r)] = n
        elif role == "loop":
            for r, n in zip([r for r in op.results if not self.ctx.has(r)], results):
                self.vmap[id(r)] = n

    # -- chunks ------------------------------------------------------------------------------------
    def operand(self, v: Value, scope: Scope) -> Value:
        return self.pull(v, scope) if self.ctx.has(v) else scope.plain(v)

    def pull(self, v: Value, scope: Scope) -> Value:
        """The chunk of `v` in this pass, computed from its operands' chunks where not yet known."""
        got = scope.chunk(v)
        if got is not None:
            return got
        op = v.owner
        if op is None:
            raise NotApplicable("a loop-carried tile with the chunked axis is read where it cannot be recomputed")
        top = scope.top()
        if op.name in (FOR, IF):
            self.rebuild_loop(op, top)
            return top.dmap[id(v)]
        if op.name == STORE or op.blocks or self.ctx.role(op) != "par":
            raise NotApplicable(f"the chunks of '{op.name}' cannot be recomputed")
        if op.name == LOAD:
            self.note_reload(op, top)
        operands = [self.operand(o, top) for o in op.operands]
        top.em.loc, loc = op.loc, top.em.loc
        new = clone_chunked(top.em, op, operands, [self.ctx.axis(r) for r in op.results], self.ctx.size, top.offset)
        top.em.loc = loc
        for r, n in zip(op.results, new):
            top.dmap[id(r)] = n
        return top.dmap[id(v)]

    def note_reload(self, op: Op, scope: Scope) -> None:
        i = self.index.get(id(op))
        if i is None:   # a load of an enclosing region, re-read inside this one
            if bases(op.operands[0]) & self.ctx.stored:
                raise NotApplicable("a tile re-read inside a loop from a tensor the kernel also writes")
            return
        self.pulls.append((i, self.pass_.get(scope.root_index, 0), scope.root_index))

    def rebuild_loop(self, op: Op, scope: Scope) -> Op:
        """A loop whose body runs chunk by chunk, once per chunk (interchanged with the chunk loop);
        a run-time `if` alike, its branches yielding chunks."""
        if op.name == IF:
            return self.rebuild_if(op, scope)
        ctx = self.ctx
        bounds = [scope.plain(v) for v in op.operands[:3]]
        inits = [self.operand(v, scope) for v in op.operands[3:]]
        body = op.blocks[0]
        args = [Value(a.type if not ctx.has(a) else chunked(a.type, ctx.axis(a), ctx.size), a.loc) for a in body.args]
        nb = Block(args)
        inner = Scope(self, Emitter(nb, op.loc), scope.offset, scope.iteration, parent=scope)
        inner.root_index = scope.root_index
        for a, n in zip(body.args, args):
            (inner.dmap if ctx.has(a) else inner.fmap)[id(a)] = n
        for b in body.ops:
            self.rebuild_body_op(b, inner)
        new = scope.em.op("for", bounds + inits, dict(op.attrs), [nb])
        for r, n in zip(op.results, new.results):
            (scope.dmap if ctx.has(r) else scope.fmap)[id(r)] = n
        return new

    def rebuild_if(self, op: Op, scope: Scope) -> Op:
        blocks = []
        for b in op.blocks:
            nb = Block([])
            inner = Scope(self, Emitter(nb, op.loc), scope.offset, scope.iteration, parent=scope)
            inner.root_index = scope.root_index
            for o in b.ops:
                self.rebuild_body_op(o, inner)
            blocks.append(nb)
        types = [chunked(r.type, self.ctx.axis(r), self.ctx.size) for r in op.results]
        new = scope.em.op("if", [scope.plain(op.operands[0])], {**op.attrs, "types": types}, blocks)
        for r, n in zip(op.results, new.results):
            (scope.dmap if self.ctx.has(r) else scope.fmap)[id(r)] = n
        return new

    def rebuild_body_op(self, b: Op, inner: Scope) -> None:
        ctx = self.ctx
        inner.em.loc = b.loc
        if b.name in (FOR, IF) and ctx.touches(b):
            self.rebuild_loop(b, inner)
            return
        if not ctx.touches(b):
            new = clone_plain(inner.em, b, inner.plain)
            for r, n in zip(b.results, new.results):
                inner.fmap[id(r)] = n
            return
        operands = [self.operand(o, inner) for o in b.operands]
        if b.name in (YIELD, STORE):
            inner.em.op(b.name, operands)
            return
        new = clone_chunked(inner.em, b, operands, [ctx.axis(r) for r in b.results], ctx.size, inner.offset)
        for r, n in zip(b.results, new):
            (inner.dmap if ctx.has(r) else inner.fmap)[id(r)] = n

    # -- memory order ------------------------------------------------------------------------------
    def check_memory_order(self) -> None:
        """A re-read load must still see (or not see) exactly the stores it saw in program order."""
        for li, p, ri in self.pulls:
            load = self.ops[li]
            lb = bases(load.operands[0])
            for si, op in enumerate(self.ops):
                stored = _memory(op)[1]
                if not stored & lb or si == li:
                    continue
                sp = 2 * self.pass_[si] + 1 if si in self.pass_ else 2 * self.gap.get(si, 0)
                pos = 2 * p + 1
                same = op.name == STORE and same_value(op.operands[0], load.operands[0])
                if si < li and not (sp < pos or (sp == pos and same)):
                    raise NotApplicable("a re-read load would miss a store before it")
                if si > li and not (pos < sp or (pos == sp and same and ri <= si)):
                    raise NotApplicable("a re-read load would see a store after it")


def same_value(a: Value, b: Value, depth: int = 0) -> bool:
    """Whether two values are computed by the same expression (a pointer tile rebuilt at each use)."""
    if a is b:
        return True
    oa, ob = a.owner, b.owner
    if oa is None or ob is None or depth > 32 or oa.name != ob.name or oa.blocks or ob.blocks:
        return False
    if a.type != b.type or repr(sorted(oa.attrs.items())) != repr(sorted(ob.attrs.items())) or \
            len(oa.operands) != len(ob.operands) or not OPS[oa.name].pure:
        return False
    return all(same_value(x, y, depth + 1) for x, y in zip(oa.operands, ob.operands))


def clone_plain(em: Emitter, op: Op, lookup) -> Op:
    """`op` with its operands (and nested blocks) mapped through `lookup`, shapes unchanged."""
    blocks = []
    local: dict[int, Value] = {}

    def get(v):
        return local.get(id(v)) or lookup(v)

    for b in op.blocks:
        args = [Value(a.type, a.loc) for a in b.args]
        local.update({id(a): n for a, n in zip(b.args, args)})
        nb = Block(args)
        for o in b.ops:
            new = clone_plain(Emitter(nb, o.loc), o, get)
            local.update({id(r): n for r, n in zip(o.results, new.results)})
        blocks.append(nb)
    new = Op(op.name, [get(v) for v in op.operands], [r.type for r in op.results], dict(op.attrs), blocks, op.loc)
    em.block.append(new)
    return new


def stripmine(fn: Function, dims: Dims, dim, size: int, strict: bool) -> Function:
    ctx = Ctx(fn, dims, dim, size, strict)
    body = Block()
    scope = {id(p.value): p.value for p in fn.params}
    Region(ctx, fn.body, body, scope, parent=None).run()
    return Function(fn.name, fn.params, body, fn.specialization)   # verified once chosen (plan_memory)
