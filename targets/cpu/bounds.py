"""The cpu target's bounds-checked lowering (TILEJIT_CPU_BOUNDS_CHECK=1): every element a load or
store touches is checked against the view of the tensor its pointer came from.

The launcher passes each pointer argument's view range (`tj_range`: the data pointer, and the bytes
from its first to one past its last element: compiler/target/args.py); the generated code wraps
each access's address in `tj_bc`, which lets it through when it lies inside, and otherwise skips
the access (a load reads 0), records the first such access in the launch's status and goes on, so
the launcher raises an error naming the kernel, the op, the argument, the element offset and the
extent, instead of crashing. Masked-off elements are never checked: the masked paths evaluate the
address only where the mask is true.

Which argument a pointer came from is found statically by following the IR from the access back
to a parameter through pointer arithmetic, views, casts and loop-carried values; a pointer that
may come from several (a `where` between two tensors) is checked against all of them.
"""
from __future__ import annotations

from compiler.ir import Op, Value
from compiler.ir.ops import OPS

from targets.cfamily.lowering import CLowering

_THROUGH = {"add", "sub", "cast"}   # pointer arithmetic: the pointer operand keeps its origin


def _yielded(block) -> list[Value]:
    return block.ops[-1].operands if block.ops and block.ops[-1].name == "yield" else []


class BoundsCheckedLowering(CLowering):
    checks_addresses = True

    def __init__(self, fn, dialect, policy="fast"):
        super().__init__(fn, dialect, policy)
        self._param = {id(p.value): i for i, p in enumerate(fn.params)}
        self._pointer_params = [i for i, p in enumerate(fn.params) if p.type.dtype.is_ptr()]
        self._carried: dict[int, list[Value]] = {}   # block arg / loop result -> the values it is set from
        for op in fn.walk():
            if op.name == "for":
                body = op.blocks[0]
                yielded = body.ops[-1].operands if body.ops and body.ops[-1].name == "yield" else []
                for j, (arg, res) in enumerate(zip(body.args[1:], op.results)):
                    srcs = [op.operands[3 + j]] + ([yielded[j]] if j < len(yielded) else [])
                    self._carried[id(arg)] = srcs
                    self._carried[id(res)] = srcs
            elif op.name == "while":   # both blocks' arguments and the results share one slot each
                cond, body = op.blocks
                yielded = _yielded(body)
                for j, init in enumerate(op.operands):
                    srcs = [init] + ([yielded[j]] if j < len(yielded) else [])
                    for vals in (cond.args, body.args, op.results):
                        if j < len(vals):
                            self._carried[id(vals[j])] = srcs
            elif op.name == "if":
                for j, res in enumerate(op.results):
                    self._carried[id(res)] = [y[j] for y in map(_yielded, op.blocks) if j < len(y)]
        self._origins: dict[int, frozenset] = {}

    def origin(self, v: Value) -> frozenset:
        """The parameter indices pointer `v` may come from (empty: unknown, check against all)."""
        hit = self._origins.get(id(v))
        if hit is not None:
            return hit
        self._origins[id(v)] = frozenset()   # a cycle through a loop adds nothing new
        out: set[int] = set()
        stack = [v]
        seen = set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if id(x) in self._param:
                out.add(self._param[id(x)])
            elif id(x) in self._carried:
                stack.extend(self._carried[id(x)])
            elif x.owner is not None and (x.owner.name in _THROUGH or OPS[x.owner.name].kind == "view"):
                stack.extend(o for o in x.owner.operands if o.dtype.is_ptr())
            elif x.owner is not None and x.owner.name == "where":
                stack.extend(x.owner.operands[1:])
            else:
                out.clear()
                break   # made some other way (a loaded pointer): unknown
        res = frozenset(i for i in out if i in self._pointer_params)
        self._origins[id(v)] = res
        return res

    def address(self, op: Op, expr: str, store: bool = False) -> str:
        site = self.op_index[id(op)]
        src = sorted(self.origin(op.operands[0]))
        if len(src) == 1:
            return f"tj_bc({expr}, tj_rng, tj_st, {src[0]}, {site}, {int(store)})"
        args = src or self._pointer_params
        table = self.fresh("tj_args")
        self.emit(f"static const int {table}[] = {{{', '.join(map(str, args))}}};")
        return f"tj_bc_any({expr}, tj_rng, tj_st, {table}, {len(args)}, {site}, {int(store)})"
