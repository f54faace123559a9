"""The cpu target's bounds-checked lowering (TILEJIT_CPU_BOUNDS_CHECK=1): every element a load or
store touches is checked against the view of the tensor its pointer came from.

The launcher passes each pointer argument's view range (`tj_range`: the data pointer, and the bytes
from its first to one past its last element: compiler/target/args.py); the generated code wraps
each access's address in `tj_bc`, which lets it through when it lies inside, and otherwise skips
the access (a load reads 0), records the first such access in the launch's status and goes on, so
the launcher raises an error naming the kernel, the op, the argument, the element offset and the
extent, instead of crashing. Masked-off elements are never checked: the masked paths evaluate the
address only where the mask is true.

Which argument a pointer came from is found statically (targets/cfamily/origins.py); a pointer that
may come from several (a `where` between two tensors) is checked against all of them.
"""
from __future__ import annotations

from compiler.ir import Op, Value

from targets.cfamily.lowering import CLowering
from targets.cfamily.origins import PointerOrigins


class BoundsCheckedLowering(CLowering):
    checks_addresses = True

    def __init__(self, fn, dialect, policy: str):
        super().__init__(fn, dialect, policy)
        self._origins = PointerOrigins(fn)
        self._pointer_params = self._origins.pointer_params

    def origin(self, v: Value) -> frozenset:
        """The parameter indices pointer `v` may come from (empty: unknown, check against all)."""
        return self._origins.of(v)

    def address(self, op: Op, expr: str, store: bool = False) -> str:
        site = self.op_index[id(op)]
        src = sorted(self.origin(op.operands[0]))
        if len(src) == 1:
            return f"tj_bc({expr}, tj_rng, tj_st, {src[0]}, {site}, {int(store)})"
        args = src or self._pointer_params
        table = self.fresh("tj_args")
        self.emit(f"static const int {table}[] = {{{', '.join(map(str, args))}}};")
        return f"tj_bc_any({expr}, tj_rng, tj_st, {table}, {len(args)}, {site}, {int(store)})"
