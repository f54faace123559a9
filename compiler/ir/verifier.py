"""Checks the IR's invariants: types agree with each op's rule, every operand is defined
before use in an enclosing block, loops yield what they carry. A failure is a compiler bug,
reported with the op's text and the user's source location."""
from __future__ import annotations

from .. import dtypes as D
from ..errors import IRError
from .core import Block, Function, Op
from .ops import FOR, IF, OPS, WHILE, YIELD, TypeRuleError, infer


def verify(fn: Function) -> None:
    defined = {id(p.value) for p in fn.params}
    _verify_block(fn, fn.body, defined, top=True)


def _fail(fn: Function, op: Op, msg: str) -> None:
    raise IRError.at(op.loc, f"IR verification failed at op '{op.name}' (a compiler bug): {msg}", kernel=fn.name)


def _verify_block(fn: Function, block: Block, defined: set[int], top: bool = False) -> None:
    defined = set(defined) | {id(a) for a in block.args}
    for i, op in enumerate(block.ops):
        if op.name not in OPS:
            _fail(fn, op, "unknown op")
        for v in op.operands:
            if id(v) not in defined:
                _fail(fn, op, f"operand {v} used before it is defined")
        if op.name == YIELD and i != len(block.ops) - 1:
            _fail(fn, op, "yield must end its block")
        try:
            types = infer(op.name, [v.type for v in op.operands], op.attrs)
        except TypeRuleError as e:
            _fail(fn, op, str(e))
        if types != [r.type for r in op.results]:
            _fail(fn, op, f"result types {[str(r.type) for r in op.results]} != rule {[str(t) for t in types]}")
        for r in op.results:
            if r.owner is not op:
                _fail(fn, op, "result's owner is not its op")
        if op.name in _STRUCTURED:
            _STRUCTURED[op.name](fn, op, defined)
        elif op.blocks:
            _fail(fn, op, "only for, while and if have blocks")
        defined |= {id(r) for r in op.results}
    if top and block.ops and block.ops[-1].name == YIELD:
        _fail(fn, block.ops[-1], "yield outside a loop or an if")


def _verify_for(fn: Function, op: Op, defined: set[int]) -> None:
    if len(op.blocks) != 1:
        _fail(fn, op, "a loop has exactly one body block")
    body = op.blocks[0]
    bounds = op.operands[:3]
    if any(not b.type.is_scalar or not b.dtype.is_int() for b in bounds):
        _fail(fn, op, "loop bounds must be integer scalars")
    carried = op.operands[3:]
    if len(body.args) != 1 + len(carried):
        _fail(fn, op, "body arguments must be the induction variable plus one per carried value")
    if [a.type for a in body.args[1:]] != [c.type for c in carried]:
        _fail(fn, op, "body argument types differ from the carried initial values")
    if not body.ops or body.ops[-1].name != YIELD:
        _fail(fn, op, "loop body must end with yield")
    y = body.ops[-1]
    if [v.type for v in y.operands] != [c.type for c in carried]:
        _fail(fn, op, "yielded types differ from the carried types: "
              f"{[str(v.type) for v in y.operands]} vs {[str(c.type) for c in carried]}")
    _verify_block(fn, body, defined)


def _yielded(fn: Function, op: Op, block, what: str) -> list:
    if not block.ops or block.ops[-1].name != YIELD:
        _fail(fn, op, f"{what} must end with yield")
    return [v.type for v in block.ops[-1].operands]


def _verify_while(fn: Function, op: Op, defined: set[int]) -> None:
    if len(op.blocks) != 2:
        _fail(fn, op, "a while loop has a condition block and a body block")
    types = [v.type for v in op.operands]
    for blk, what in zip(op.blocks, ("the condition block", "the loop body")):
        if [a.type for a in blk.args] != types:
            _fail(fn, op, f"the arguments of {what} differ from the carried types")
    cond = _yielded(fn, op, op.blocks[0], "the condition block")
    if len(cond) != 1 or not cond[0].is_scalar or cond[0].dtype is not D.int1:
        _fail(fn, op, f"the condition block must yield one int1 scalar, got {[str(t) for t in cond]}")
    if _yielded(fn, op, op.blocks[1], "the loop body") != types:
        _fail(fn, op, "the loop body yields other types than it carries")
    for blk in op.blocks:
        _verify_block(fn, blk, defined)


def _verify_if(fn: Function, op: Op, defined: set[int]) -> None:
    if len(op.blocks) != 2 or any(b.args for b in op.blocks):
        _fail(fn, op, "an if has a then block and an else block, without arguments")
    want = [r.type for r in op.results]
    for blk, what in zip(op.blocks, ("the then block", "the else block")):
        got = _yielded(fn, op, blk, what)
        if got != want:
            _fail(fn, op, f"{what} yields {[str(t) for t in got]}, the if has results {[str(t) for t in want]}")
        _verify_block(fn, blk, defined)


_STRUCTURED = {FOR: _verify_for, WHILE: _verify_while, IF: _verify_if}
