"""Ops are compared by the registry's constants and traits, never by a string literal: package code
writes `op.name == LOAD` (a misspelt constant fails at import) or `OPS[op.name].has("trait")`, so a
misspelt name cannot silently never match. The scan below keeps string literals out of every
comparison with an op's name in compiler/, targets/, kernels/ and runtime/."""
from __future__ import annotations

import ast
import itertools
import pathlib

import pytest

from compiler.ir import ops

pytestmark = pytest.mark.no_toolchain

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "kernels", "targets", "runtime")
# `.name` comparisons that are not about ops: (file, receiver) -> what the name is
NOT_OPS = {
    ("compiler/cache/safety.py", "os"): "the operating system",
    ("compiler/dtypes.py", "self"): "a dtype",
    ("compiler/frontend_names.py", "self"): "a tile method",
    ("targets/kunlun/build/toolchain.py", "c"): "a toolchain component",
}
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _literals(node) -> list[str]:
    """The string literals of a comparison operand: a string, or the strings of a tuple, list or set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _name_of(node, aliases: dict[str, str]) -> str | None:
    """The receiver of `x.name`, also through a local bound to one (`name = op.name`); else None."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        return ast.unparse(node.value)
    return aliases.get(node.id) if isinstance(node, ast.Name) else None


def _aliases(fn) -> dict[str, str]:
    """The locals of `fn` bound to some `x.name`, each with its `x`."""
    return {t.id: ast.unparse(n.value.value) for n in ast.walk(fn)
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and n.value.attr == "name"
            for t in n.targets if isinstance(t, ast.Name)}


def literal_name_comparisons(source: str, path: str) -> list[str]:
    """Each comparison of an op's name with a string literal in `source`, as 'path:line: message'."""
    tree = ast.parse(source)
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out = []
    for scope in [tree, *scopes]:
        aliases = _aliases(scope) if scope is not tree else {}
        for node in ast.walk(scope):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            for (a, b), op in zip(itertools.pairwise(sides), node.ops):
                if not isinstance(op, _COMPARISONS):
                    continue
                # `"x" in name` tests a substring: an op's name is only ever the left of `in`
                pairs = ((a, b), (b, a)) if isinstance(op, (ast.Eq, ast.NotEq)) else ((a, b),)
                for named, other in pairs:
                    receiver = _name_of(named, aliases)
                    if receiver is None or (path, receiver) in NOT_OPS:
                        continue
                    for text in _literals(other):
                        why = (f"compare with compiler.ir.ops.{text.upper()} or a trait, not the literal"
                               if text in ops.OPS else "not a registered op name (misspelt? not an op?)")
                        out.append(f"{path}:{node.lineno}: {text!r}: {why}")
    return sorted(set(out))


def test_no_op_name_is_compared_with_a_string_literal():
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += literal_name_comparisons(path.read_text(), rel)
    assert not found, "\n".join(found)


def test_the_scan_catches_literals_constants_do_not():
    src = ("def f(op, u):\n"
           "    name = op.name\n"
           "    a = op.name == 'laod'\n"
           "    b = u.name in ('store', LOAD)\n"
           "    c = name != 'for'\n"
           "    return a, b, c, op.name == LOAD, OPS[op.name].has('ring')\n")
    found = literal_name_comparisons(src, "x.py")
    assert [f.split(": ")[1] for f in found] == ["'laod'", "'store'", "'for'"], found
    assert "not a registered op name" in found[0] and "ops.STORE" in found[1] and "ops.FOR" in found[2]


def test_every_op_has_its_constant():
    for name in ops.OPS:
        assert getattr(ops, name.upper()) == name


def test_an_unknown_trait_is_an_error():
    with pytest.raises(KeyError, match="rnig"):
        ops.OPS["add"].has("rnig")
    with pytest.raises(KeyError, match="rnig"):
        ops.ops_with("rnig")
    assert ops.OPS["add"].has("ring") and not ops.OPS["div"].has("ring")


def test_atomics_are_computed_whole():
    """The ops with an effect and results (the atomics) are never evaluated again per element where
    their results are used: an atomic inlined into two consumer loop nests would update memory twice."""
    assert ops.ops_with("atomic") <= ops.ops_with("whole_result")
