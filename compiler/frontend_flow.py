"""Control flow of the frontend (a mixin of FunctionVisitor): `if` on constexprs (one branch is
walked) and on run-time scalars (an `if` op whose results are the names the branches assign),
an early `return` under a run-time condition (the statements after it become both branches'
continuation), `for` over `range`/`tl.range` and `while` on run-time scalars (loops whose carried
values are the names the body assigns), `tl.static_range` (unrolled), conditional expressions and
`and`/`or` on run-time scalars.

Values that cross a branch or a loop iteration are flattened into leaves (tuples and aggregates
such as block pointers hold several): a leaf that is a tile or a Python number is carried in the
IR, any other leaf (a dtype, a string, None) must be the same on every path.
"""
from __future__ import annotations

import ast

from . import dtypes as D
from . import language as lang
from .ir import Block, TileType, Value
from .semantic import Tile


class _Return(Exception):
    def __init__(self, value):
        self.value = value


_NOT_RETURNED = object()


def flatten(v) -> tuple[list, object]:
    """(leaves, rebuild): tuples, lists and aggregates (objects with `tj_flatten`) are opened."""
    if isinstance(v, (tuple, list)):
        parts = [flatten(x) for x in v]
        kind = type(v)

        def rebuild(leaves, parts=parts, kind=kind):
            out, i = [], 0
            for p_leaves, p_rebuild in parts:
                out.append(p_rebuild(leaves[i:i + len(p_leaves)]))
                i += len(p_leaves)
            return kind(out)
        return [leaf for p in parts for leaf in p[0]], rebuild
    if hasattr(v, "tj_flatten"):
        return v.tj_flatten()
    return [v], lambda leaves: leaves[0]


def is_dynamic(x) -> bool:
    """A leaf that lives in the IR when it crosses a branch or a loop iteration."""
    return isinstance(x, (Tile, int, float)) and not isinstance(x, lang.constexpr)


def _same_static(a, b) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a usable ==
        return False


def _contains_return(stmts) -> bool:
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Return):
                return True
    return False


def assigned_names(stmts) -> set[str]:
    out = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
    return out


class _Carry:
    """The names a loop carries: per name its leaves, which of them are carried, and the initial
    tiles (one per carried leaf, in name order)."""

    def __init__(self, visitor, names, keep=frozenset(), scope=None):
        b = visitor.builder
        scope = visitor.scope if scope is None else scope
        self.entries = []     # (name, rebuild, leaves with None at carried positions, carried indices)
        self.inits: list[Tile] = []
        self.held = []        # per carried slot: (name, leaf index) when it is a leaf of a structure
        self.keep = keep      # such leaves the body leaves alone: not carried (constants stay constants)
        for n in names:
            value = scope[n]
            leaves, rebuild = flatten(value)
            structured = isinstance(value, (tuple, list)) or hasattr(value, "tj_flatten")
            dyn = [i for i, x in enumerate(leaves) if is_dynamic(x) and (n, i) not in keep]
            if not dyn:
                continue
            for i in dyn:
                x = leaves[i]
                self.inits.append(x if isinstance(x, Tile) else b.to_tile(x))
                self.held.append((n, i) if structured else None)
            self.entries.append((n, rebuild, [None if i in dyn else x for i, x in enumerate(leaves)], dyn))

    def untouched(self, ys, args) -> frozenset:
        """The structures' leaves the body yields back unchanged (the slot's own argument)."""
        return frozenset(h for h, y, a in zip(self.held, ys, args) if h is not None and y.value is a)

    @property
    def names(self) -> list[str]:
        return [e[0] for e in self.entries]

    def bind(self, scope: dict, args: list[Value]) -> None:
        it = iter(args)
        for n, rebuild, leaves, dyn in self.entries:
            vals = list(leaves)
            for i in dyn:
                vals[i] = Tile(next(it))
            scope[n] = rebuild(vals)

    def collect(self, visitor, node, scope: dict) -> list:
        """The leaves the body leaves in the carried slots (checked against the static ones)."""
        out = []
        for n, _rebuild, leaves, dyn in self.entries:
            if n not in scope:
                raise visitor.error(node, f"loop-carried '{n}' is not defined at the end of the loop body")
            new, _ = flatten(scope[n])
            if len(new) != len(leaves) or any(i not in dyn and not _same_static(new[i], leaves[i])
                                               for i in range(len(leaves))):
                raise visitor.error(node, f"loop-carried '{n}' changes its structure or a compile-time part of "
                                          "its value in the loop body; only tensor and number parts may change")
            out.extend(new[i] for i in dyn)
        return out


class FlowMixin:
    """Statements with control flow; see the module docstring."""

    # -- statement lists with a continuation ---------------------------------------------------
    def visit_stmts(self, stmts, cont=()):
        """Visits `stmts`; `cont` is what runs after them (up to the end of the function), for an
        early `return` under a run-time condition, which takes the rest of the function into its
        branches."""
        for i, s in enumerate(stmts):
            if isinstance(s, ast.If) and _contains_return([s]):
                self.builder.loc = self.loc(s)
                self._if_with_rest(s, list(stmts[i + 1:]) + list(cont))
            else:
                self.visit(s)

    def visit_Return(self, node):
        if self.loop_depth:
            raise self.error(node, "'return' inside a loop is not supported: let the loop finish (e.g. fold "
                                   "the exit condition into a mask or a `while` condition) and return after it")
        raise _Return(self.visit(node.value) if node.value is not None else None)

    def visit_If(self, node):
        self._if_with_rest(node, None)

    def _if_with_rest(self, node, rest):
        cond = self.visit(node.test)
        if isinstance(cond, lang.constexpr):
            cond = cond.value
        if not isinstance(cond, Tile):
            self.visit_stmts(node.body if cond else node.orelse, rest or ())
            return
        c = self.truth(node.test, cond, "an 'if'")
        if rest is None:
            self._runtime_if(node, c)
            return
        if self.loop_depth:
            raise self.error(node, "'return' inside a loop is not supported")
        if self.static_depth:
            raise self.error(node, "a 'return' under a run-time condition inside tl.static_range is not "
                                   "supported; compute a flag and guard the rest with it")
        # an early return: each branch runs to its own end of the function, the if yields what
        # the function returns
        ret = self._branches(node, c, [list(node.body) + rest, list(node.orelse) + rest],
                             lambda scopes, returns: [("the returned value", returns)], returns=True)
        raise _Return(ret[0] if ret else None)

    def truth(self, node, v: Tile, what: str) -> Tile:
        """An int1 scalar from a run-time scalar condition (a single-element tensor is its element,
        as Triton unsplats it)."""
        if v.shape and v.type.numel == 1:
            from .builtins_combine import item_of  # noqa: PLC0415
            v = item_of(self.builder, v)
        if v.shape:
            raise self.error(node, f"{what} on a tensor of shape {list(v.shape)}: the condition must be a "
                                   "scalar (use tl.where for elementwise choices, or reduce it with tl.max / "
                                   "tl.sum first)")
        if v.dtype.is_ptr():
            raise self.error(node, f"{what} on a pointer value is not supported")
        if v.dtype is not D.int1:
            v = self.builder.binary("ne", v, 0.0 if v.dtype.is_floating() else 0)
        return v

    def _runtime_if(self, node, c: Tile) -> None:
        names = sorted(assigned_names(node.body) | assigned_names(node.orelse))
        outer = self.scope

        def items(scopes, returns):
            out = []
            for n in names:
                have = [n in s for s in scopes]
                if all(have):
                    out.append((n, [s[n] for s in scopes]))
                elif n not in outer:
                    out.append((n, None))   # defined on one path only: not defined after the if
            return out

        merged = self._branches(node, c, [node.body, node.orelse], items)
        for n, v in merged.items():
            if v is _NOT_RETURNED:
                self.scope.pop(n, None)
                self.gone[n] = "it is assigned in only one branch of an 'if' on a run-time value"
            else:
                self.scope[n] = v

    def _branches(self, node, c: Tile, branch_stmts, items_of, returns: bool = False):
        """Walks each branch into its own block, then builds the `if` op yielding the merged items
        (`items_of(scopes, returned values)` -> [(name, [value per branch] or None)]). Returns
        {name: merged value} (or, with `returns`, the list of merged values)."""
        b = self.builder
        outer_block, outer_scope = b.block, self.scope
        blocks, scopes, rets = [], [], []
        for stmts in branch_stmts:
            blk = Block()
            self.scope = dict(outer_scope)
            b.block = blk
            ret = _NOT_RETURNED
            try:
                self.visit_stmts(stmts)
            except _Return as r:
                ret = r.value
            finally:
                b.block = outer_block
            if returns and ret is _NOT_RETURNED:
                ret = None    # fell off the end of the function
            blocks.append(blk)
            scopes.append(self.scope)
            rets.append(ret)
        self.scope = outer_scope
        items = items_of(scopes, rets)
        merged = self.merge_values(node, c, blocks, [v for _, v in items if v is not None],
                                   [n for n, v in items if v is not None])
        if returns:
            return merged
        out, it = {}, iter(merged)
        for n, v in items:
            out[n] = _NOT_RETURNED if v is None else next(it)
        return out

    def merge_values(self, node, c: Tile, blocks, values_per_item, what_names) -> list:
        """Builds `if c {blocks[0]; yield} else {blocks[1]; yield}` and returns, per item, its value
        after the if: unchanged leaves stay what they are, differing ones become if results."""
        b = self.builder
        outer_block = b.block
        yields = ([], [])
        plan = []
        for name, values in zip(what_names, values_per_item):
            name = f"'{name}'" if name.isidentifier() else name
            flats = [flatten(v) for v in values]
            la, lb = flats[0][0], flats[1][0]
            if len(la) != len(lb):
                raise self.error(node, f"{name} has a different structure in the two branches")
            slots = []
            for x, y in zip(la, lb):
                if isinstance(x, Tile) and x is y or not isinstance(x, Tile) and not isinstance(y, Tile) \
                        and _same_static(x, y):
                    slots.append(("same", x))
                    continue
                if not (is_dynamic(x) and is_dynamic(y)):
                    raise self.error(node, f"{name} holds different compile-time values in the two branches "
                                           f"of a run-time 'if' ({x!r} and {y!r})")
                xt, yt = self._unify_pair(name, node, blocks, x, y)
                yields[0].append(xt)
                yields[1].append(yt)
                slots.append(("yield", len(yields[0]) - 1))
            plan.append((flats[0][1], slots))
        for blk, ys in zip(blocks, yields):
            b.block = blk
            b.op("yield", ys)
        b.block = outer_block
        results = b.op("if", [c], {"types": [t.type for t in yields[0]]}, blocks=list(blocks))
        out = []
        for rebuild, slots in plan:
            out.append(rebuild([v if k == "same" else results[v] for k, v in slots]))
        return out

    def _unify_pair(self, name, node, blocks, x, y) -> tuple[Tile, Tile]:
        """Both sides as tiles of one type (numbers typed after the tile, dtypes promoted, a scalar
        broadcast to the other side's shape), each made in its own branch."""
        b = self.builder
        outer_block = b.block
        like = x.dtype if isinstance(x, Tile) else y.dtype if isinstance(y, Tile) else None
        vals = []
        for blk, v in zip(blocks, (x, y)):
            b.block = blk
            vals.append(b.to_tile(v, like))
        dt = vals[0].dtype if vals[0].dtype is vals[1].dtype else None
        if dt is None:
            if vals[0].dtype.is_ptr() or vals[1].dtype.is_ptr():
                b.block = outer_block
                raise self.error(node, f"{name} is a {vals[0].dtype} in one branch and a {vals[1].dtype} in the other")
            dt = D.promote(vals[0].dtype, vals[1].dtype)
        shape = vals[0].shape if vals[0].shape else vals[1].shape
        out = []
        for blk, v in zip(blocks, vals):
            b.block = blk
            if v.shape != shape:
                if v.shape:
                    b.block = outer_block
                    raise self.error(node, f"{name} has shape {list(vals[0].shape)} in one branch and "
                                           f"{list(vals[1].shape)} in the other")
                v = b.broadcast_to(v, shape)
            out.append(b.cast(v, dt))
        b.block = outer_block
        return out[0], out[1]

    # -- expressions with run-time control -------------------------------------------------------
    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, lang.constexpr):
            cond = cond.value
        if not isinstance(cond, Tile):
            return self.visit(node.body if cond else node.orelse)
        c = self.truth(node.test, cond, "a conditional expression")
        vals = self._expr_branches([node.body, node.orelse])
        return self.merge_values(node, c, vals[0], [vals[1]], ["the conditional expression"])[0]

    def _expr_branches(self, exprs):
        """([block per expression], [value per expression]): each expression walked into its own block."""
        b = self.builder
        outer = b.block
        blocks, vals = [], []
        for e in exprs:
            blk = Block()
            b.block = blk
            try:
                vals.append(self.visit(e))
            finally:
                b.block = outer
            blocks.append(blk)
        return blocks, vals

    def visit_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        acc = self.visit(node.values[0])
        for v in node.values[1:]:
            if isinstance(acc, lang.constexpr):
                acc = acc.value
            if not isinstance(acc, Tile):
                if (is_and and not acc) or (not is_and and acc):
                    return acc
                acc = self.visit(v)
                continue
            acc = self._bool_pair(node, acc, v, is_and)
        return acc

    def _bool_pair(self, node, lhs: Tile, rhs_node, is_and: bool) -> Tile:
        """`lhs and rhs` / `lhs or rhs` as int1. On scalars the right side runs only when it decides
        the result (an `if`), unless it is free of side effects; tensors combine elementwise."""
        b = self.builder
        name = "and" if is_and else "or"
        if lhs.shape:
            rhs = b.to_tile(self.visit(rhs_node))
            lt = lhs if lhs.dtype is D.int1 else b.binary("ne", lhs, 0)
            rt = rhs if rhs.dtype is D.int1 else b.binary("ne", rhs, 0)
            return b.binary(name, lt, rt)
        lt = self.truth(node, lhs, f"'{name}'")
        (blk,), (rhs,) = self._expr_branches([rhs_node])
        outer = b.block
        b.block = blk
        try:
            rt = b.to_tile(rhs)
            rt = self.truth(node, rt, f"'{name}'") if not rt.shape else b.binary("ne", rt, 0) \
                if rt.dtype is not D.int1 else rt
        finally:
            b.block = outer
        if rt.shape:
            b.block.ops.extend(blk.ops)
            return b.binary(name, b.broadcast_to(lt, rt.shape), rt)
        from .ir.ops import OPS  # noqa: PLC0415
        if all(OPS[o.name].pure for o in blk.ops):
            b.block.ops.extend(blk.ops)
            return b.binary(name, lt, rt)
        other = Block()
        b.block = other
        const = b.to_tile(not is_and)
        b.block = outer
        blocks = [blk, other] if is_and else [other, blk]
        vals = [rt, const] if is_and else [const, rt]
        return self.merge_values(node, lt, blocks, [vals], [f"'{name}'"])[0]

    # -- loops -------------------------------------------------------------------------------------
    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "'for ... else' is not supported")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(it, "a kernel loop must iterate over range(...), tl.range(...) or "
                                 "tl.static_range(...)")
        func = self.visit(it.func)
        args = [self.visit(a) for a in it.args]
        kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
        args = [a.value if isinstance(a, lang.constexpr) else a for a in args]
        kwargs = {k: (v.value if isinstance(v, lang.constexpr) else v) for k, v in kwargs.items()}
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "loop variable must be a plain name")
        if func is lang.static_range or getattr(func, "__name__", "") == "static_range":
            self._static_loop(node, args, kwargs)
            return
        options = {}
        if func is lang.range or (getattr(func, "__name__", "") == "range" and func is not range):
            options = lang.range_options(kwargs)
            kwargs = {k: v for k, v in kwargs.items() if k == "step"}
        elif func is not range and getattr(func, "__name__", "") != "range":
            raise self.error(it, "a kernel loop must iterate over range(...), tl.range(...) or "
                                 "tl.static_range(...)")
        if set(kwargs) - {"step"}:
            raise self.error(it, f"range() got unexpected keyword arguments {sorted(set(kwargs) - {'step'})}")
        if kwargs:
            args += [kwargs["step"]]
        if not 1 <= len(args) <= 3:
            raise self.error(it, "range takes 1 to 3 arguments")
        lb, ub, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if isinstance(step, int) and not isinstance(step, bool) and step == 0:
            raise self.error(it, "range step must not be zero")
        self._runtime_loop(node, lb, ub, step, options)

    def _static_loop(self, node, args, kwargs):
        sr = lang.static_range(*args, **{k: v for k, v in kwargs.items() if k == "step"})
        for v in (sr.start, sr.stop, sr.step):
            if not isinstance(v, int) or isinstance(v, Tile):
                raise self.error(node.iter, "tl.static_range bounds must be constexpr ints")
        self.static_depth += 1
        try:
            for i in range(sr.start, sr.stop, sr.step):
                self.scope[node.target.id] = i
                self.visit_stmts(node.body)
        finally:
            self.static_depth -= 1

    def _loop_bounds(self, node, lb, ub, step):
        b = self.builder
        for v in (lb, ub, step):
            if isinstance(v, Tile) and (v.shape or not v.dtype.is_int() or v.dtype.is_bool()):
                raise self.error(node.iter, "range bounds must be integer scalars")
            if not isinstance(v, (Tile, int)) or isinstance(v, bool):
                raise self.error(node.iter, f"range bounds must be integers, got {v!r}")
        iv_dt = D.int64 if any(isinstance(v, Tile) and v.dtype is D.int64 for v in (lb, ub, step)) \
            or any(not isinstance(v, Tile) and not -(2 ** 31) <= v < 2 ** 31 for v in (lb, ub, step)) else D.int32
        return iv_dt, [b.cast(b.to_tile(v, iv_dt), iv_dt) for v in (lb, ub, step)]

    def _runtime_loop(self, node, lb, ub, step, options=None):
        b = self.builder
        iv_dt, bounds = self._loop_bounds(node, lb, ub, step)
        assigned = assigned_names(node.body)
        names = [n for n in sorted(assigned) if n in self.scope and n != node.target.id]
        carry = _Carry(self, names)
        outer_block, outer_scope = b.block, dict(self.scope)
        for _attempt in range(4):
            body = Block([Value(TileType(iv_dt))] + [Value(t.type) for t in carry.inits])
            self.scope = dict(outer_scope)
            self.scope[node.target.id] = Tile(body.args[0])
            carry.bind(self.scope, body.args[1:])
            self._walk_loop_body(node.body, body)
            ys, retry = self._settle(node, carry, body, self.scope)
            fixed = carry.untouched(ys, body.args[1:])
            if fixed:   # e.g. a block pointer's strides: not carried, walk again
                carry = _Carry(self, names, carry.keep | fixed, outer_scope)
                retry = True
            if not retry:
                break
        else:
            raise self.error(node, "could not settle the types of the loop-carried values")
        b.block = body
        b.op("yield", ys)
        b.block = outer_block
        attrs = {"options": dict(sorted(options.items()))} if options else None
        results = b.op("for", bounds + carry.inits, attrs, blocks=[body])
        self._after_loop(outer_scope, carry, results, assigned)

    def _walk_loop_body(self, stmts, body: Block) -> None:
        b = self.builder
        outer = b.block
        b.block = body
        self.loop_depth += 1
        try:
            self.visit_stmts(stmts)
        finally:
            self.loop_depth -= 1
            b.block = outer

    def _settle(self, node, carry: _Carry, body: Block, scope) -> tuple[list[Tile], bool]:
        """The yielded tiles (typed as the carried slots), and whether a slot's dtype had to be
        widened (then the caller walks the body again with the promoted initial values)."""
        b = self.builder
        outer = b.block
        names = [n for n, _r, _l, dyn in carry.entries for _ in dyn]
        new = carry.collect(self, node, scope)
        ys, retry = [], False
        for k, (n, y) in enumerate(zip(names, new)):
            init = carry.inits[k]
            if not isinstance(y, Tile):
                b.block = body
                y = b.to_tile(y, init.dtype)
                b.block = outer
            if y.shape != init.shape:
                raise self.error(node, f"loop-carried '{n}' changes shape from {list(init.shape)} "
                                       f"to {list(y.shape)} in the loop body; initialise it with that "
                                       f"shape before the loop (e.g. tl.zeros({list(y.shape)}, ...))")
            if y.dtype is not init.dtype:
                if y.dtype.is_ptr() or init.dtype.is_ptr():
                    raise self.error(node, f"loop-carried '{n}' changes from {init.dtype} to {y.dtype}")
                carry.inits[k] = b.cast(init, D.promote(init.dtype, y.dtype))
                retry = True
            ys.append(y)
        b.block = body
        ys = [b.cast(y, init.dtype) for y, init in zip(ys, carry.inits)]
        b.block = outer
        return ys, retry

    def _after_loop(self, outer_scope, carry: _Carry, results, assigned) -> None:
        self.scope = outer_scope
        carry.bind(self.scope, [r.value for r in results])
        for n in assigned - set(carry.names):
            if self.scope.pop(n, None) is not None or n not in outer_scope:
                self.gone[n] = "it was assigned only inside a loop body"

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "'while ... else' is not supported")
        b = self.builder
        assigned = assigned_names(node.body)
        names = [n for n in sorted(assigned) if n in self.scope]
        carry = _Carry(self, names)
        outer_block, outer_scope = b.block, dict(self.scope)
        for _attempt in range(4):
            cond = Block([Value(t.type) for t in carry.inits])
            self.scope = dict(outer_scope)
            carry.bind(self.scope, cond.args)
            b.block = cond
            try:
                c = self.visit(node.test)
                if isinstance(c, lang.constexpr):
                    c = c.value
                if not isinstance(c, Tile):
                    if not c:
                        b.block = outer_block
                        self.scope = outer_scope
                        return   # the body never runs
                    raise self.error(node.test, "a 'while' condition must be a run-time scalar; `while True:` "
                                                "with `break` is not supported (put the exit test in the condition)")
                b.op("yield", [self.truth(node.test, c, "a 'while'")])
            finally:
                b.block = outer_block
            body = Block([Value(t.type) for t in carry.inits])
            self.scope = dict(outer_scope)
            carry.bind(self.scope, body.args)
            self._walk_loop_body(node.body, body)
            ys, retry = self._settle(node, carry, body, self.scope)
            fixed = carry.untouched(ys, body.args)
            if fixed:
                carry = _Carry(self, names, carry.keep | fixed, outer_scope)
                retry = True
            if not retry:
                break
        else:
            raise self.error(node, "could not settle the types of the loop-carried values")
        b.block = body
        b.op("yield", ys)
        b.block = outer_block
        results = b.op("while", list(carry.inits), blocks=[cond, body])
        self._after_loop(outer_scope, carry, results, assigned)
