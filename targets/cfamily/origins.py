"""Which pointer arguments of a kernel a pointer value may come from, found statically by
following the IR from the value back to a parameter through pointer arithmetic, views, casts,
`where` and loop-carried values. Run-time checks name the argument of an access with it: the
cpu target's bounds-checked lowering (targets/cpu/bounds.py) and Kunlun's host emulation errors
(targets/kunlun/runtime/launcher.py)."""
from __future__ import annotations

from compiler.ir import Value
from compiler.ir.ops import FOR, IF, OPS, WHERE, WHILE, YIELD


def _yielded(block) -> list[Value]:
    return block.ops[-1].operands if block.ops and block.ops[-1].name == YIELD else []


class PointerOrigins:
    """`of(value)`: the indices of `fn`'s pointer parameters a pointer value may come from (empty:
    unknown, e.g. a pointer loaded from memory)."""

    def __init__(self, fn):
        self._param = {id(p.value): i for i, p in enumerate(fn.params)}
        self.pointer_params = [i for i, p in enumerate(fn.params) if p.type.dtype.is_ptr()]
        self._carried: dict[int, list[Value]] = {}   # block arg / loop result -> the values it is set from
        for op in fn.walk():
            if op.name == FOR:
                body = op.blocks[0]
                yielded = _yielded(body)
                for j, (arg, res) in enumerate(zip(body.args[1:], op.results)):
                    srcs = [op.operands[3 + j]] + ([yielded[j]] if j < len(yielded) else [])
                    self._carried[id(arg)] = srcs
                    self._carried[id(res)] = srcs
            elif op.name == WHILE:   # both blocks' arguments and the results share one slot each
                cond, body = op.blocks
                yielded = _yielded(body)
                for j, init in enumerate(op.operands):
                    srcs = [init] + ([yielded[j]] if j < len(yielded) else [])
                    for vals in (cond.args, body.args, op.results):
                        if j < len(vals):
                            self._carried[id(vals[j])] = srcs
            elif op.name == IF:
                for j, res in enumerate(op.results):
                    self._carried[id(res)] = [y[j] for y in map(_yielded, op.blocks) if j < len(y)]
        self._origins: dict[int, frozenset] = {}

    def of(self, v: Value) -> frozenset:
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
            elif x.owner is not None and (OPS[x.owner.name].has("keeps_origin")
                                          or OPS[x.owner.name].kind == "view"):
                stack.extend(o for o in x.owner.operands if o.dtype.is_ptr())
            elif x.owner is not None and x.owner.name == WHERE:
                stack.extend(x.owner.operands[1:])
            else:
                out.clear()
                break   # made some other way (a loaded pointer): unknown
        res = frozenset(i for i in out if i in self.pointer_params)
        self._origins[id(v)] = res
        return res
