"""A stable text form of the IR: deterministic names (%0, %1, ... and parameter names),
attributes in sorted order, no object ids. `structural_hash` hashes this text without
locations, so moving a kernel in its file or to another file keeps its cache key."""
from __future__ import annotations

import hashlib

from .core import Block, Function, Op, Value
from .ops import FOR, IF, WHILE


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.next = 0

    def define(self, v: Value, hint: str = "") -> str:
        name = f"%{hint}" if hint else f"%{self.next}"
        if not hint:
            self.next += 1
        self.names[id(v)] = name
        return name

    def __call__(self, v: Value) -> str:
        return self.names.get(id(v), "%<undefined>")


def print_function(fn: Function, with_locs: bool = False) -> str:
    namer = _Namer()
    params = []
    for p in fn.params:
        hints = "".join(f" {{{k}={v}}}" for k, v in sorted(p.hints.items()))
        params.append(f"{namer.define(p.value, p.name)}: {p.type}{hints}")
    lines = [f"kernel {fn.name}({', '.join(params)}) {{"]
    _print_block(fn.body, namer, lines, 1, with_locs)
    lines.append("}")
    return "\n".join(lines)


def _print_block(block: Block, namer: _Namer, lines: list[str], depth: int, with_locs: bool) -> None:
    for op in block.ops:
        lines.extend(_print_op(op, namer, depth, with_locs))


def _print_op(op: Op, namer: _Namer, depth: int, with_locs: bool) -> list[str]:
    ind = "  " * depth
    operands = ", ".join(namer(v) for v in op.operands)
    attrs = {k: v for k, v in op.attrs.items() if k != "type"}
    attr_s = (" {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "}") if attrs else ""
    loc_s = f"  // {op.loc.filename}:{op.loc.lineno}" if with_locs and op.loc else ""
    if op.name == FOR:
        body = op.blocks[0]
        iv = namer.define(body.args[0])
        carried = [namer.define(a) for a in body.args[1:]]
        lb, ub, st = (namer(v) for v in op.operands[:3])
        inits = ", ".join(f"{c} = {namer(v)}" for c, v in zip(carried, op.operands[3:]))
        res = [namer.define(r) for r in op.results]
        head = f"{ind}{', '.join(res) + ' = ' if res else ''}for {iv} = {lb} to {ub} step {st}"
        head += f" iter_args({inits})" if inits else ""
        head += " -> (" + ", ".join(str(r.type) for r in op.results) + ") {" + loc_s
        out = [head]
        sub: list[str] = []
        _print_block(body, namer, sub, depth + 1, with_locs)
        return out + sub + [f"{ind}}}"]
    if op.name == WHILE:
        return _print_while(op, namer, depth, with_locs, loc_s)
    if op.name == IF:
        return _print_if(op, namer, depth, with_locs, loc_s)
    res = ", ".join(namer.define(r) for r in op.results)
    types = ", ".join(str(r.type) for r in op.results)
    lhs = f"{res} = " if res else ""
    rhs_t = f" : {types}" if types else ""
    return [f"{ind}{lhs}{op.name}{attr_s} {operands}".rstrip() + rhs_t + loc_s]


def _print_while(op: Op, namer: _Namer, depth: int, with_locs: bool, loc_s: str) -> list[str]:
    """`%r = while (%c = %init, ...) -> (types) { cond; yield %b } do (%x, ...) { body; yield ... }`;
    the numbering defines the condition's arguments, the body's, the results, then the blocks."""
    ind = "  " * depth
    cond, body = op.blocks
    cargs = [namer.define(a) for a in cond.args]
    bargs = [namer.define(a) for a in body.args]
    res = [namer.define(r) for r in op.results]
    inits = ", ".join(f"{c} = {namer(v)}" for c, v in zip(cargs, op.operands))
    head = f"{ind}{', '.join(res) + ' = ' if res else ''}while ({inits})"
    head += " -> (" + ", ".join(str(r.type) for r in op.results) + ") {" + loc_s
    out = [head]
    _print_block(cond, namer, out, depth + 1, with_locs)
    out.append(f"{ind}}} do ({', '.join(bargs)}) {{")
    _print_block(body, namer, out, depth + 1, with_locs)
    return out + [f"{ind}}}"]


def _print_if(op: Op, namer: _Namer, depth: int, with_locs: bool, loc_s: str) -> list[str]:
    """`%r, ... = if %c -> (types) { ...; yield ... } else { ...; yield ... }` (results numbered first)."""
    ind = "  " * depth
    res = [namer.define(r) for r in op.results]
    head = f"{ind}{', '.join(res) + ' = ' if res else ''}if {namer(op.operands[0])}"
    head += " -> (" + ", ".join(str(r.type) for r in op.results) + ") {" + loc_s
    out = [head]
    _print_block(op.blocks[0], namer, out, depth + 1, with_locs)
    out.append(f"{ind}}} else {{")
    _print_block(op.blocks[1], namer, out, depth + 1, with_locs)
    return out + [f"{ind}}}"]


def structural_hash(fn: Function) -> str:
    """sha256 of the location-free printed IR plus the specialisation."""
    text = print_function(fn, with_locs=False) + "\n" + repr(sorted(fn.specialization.items()))
    return hashlib.sha256(text.encode()).hexdigest()
