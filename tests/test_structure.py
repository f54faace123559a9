"""The project's structure as rules that fail when broken: the layers import in one direction (no
import cycle among the project's modules, compiler/ never imports kernels/), modules and functions
stay small, and every renderer covers or explicitly rejects every IR op of the registry."""
from __future__ import annotations

import ast
import pathlib

import pytest

from compiler.ir.ops import OPS

pytestmark = pytest.mark.no_toolchain

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "kernels", "targets", "runtime")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(mod: str, node, is_pkg: bool) -> set[str]:
    """The project modules an import statement in `mod` names (resolved to the longest known prefix)."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    found = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != mod:
            found.add(name)
    return found


def _imports(module_level_only: bool) -> dict[str, set[str]]:
    graph = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text())
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        deps = set()
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _imported(mod, node, path.name == "__init__.py")
        graph[mod] = deps
    return graph


def _is_face_of(pkg: str, mod: str) -> bool:
    """A package's __init__ importing its own submodules is its face, not a dependency cycle."""
    return mod.startswith(pkg + ".")


def test_no_import_cycle_among_the_projects_modules():
    graph = {m: {d for d in deps if not _is_face_of(d, m) and not _is_face_of(m, d)}
             for m, deps in _imports(module_level_only=True).items()}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_compiler_never_imports_the_library_kernels():
    bad = sorted((m, d) for m, deps in _imports(module_level_only=False).items() if m.split(".")[0] == "compiler"
                 for d in deps if d.split(".")[0] == "kernels")
    assert not bad, f"compiler/ imports kernels/ (the library is found through op specs): {bad}"


def test_modules_and_functions_are_small():
    big = [f"{p.relative_to(ROOT)}: {n} lines" for p in MODULES.values()
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not big and not long, "\n".join(big + long)


def _cpu_coverage():
    from targets.cfamily.lowering import CLowering
    from targets.cpu.renderer import CPUDialect
    return CLowering.covered_ops(CPUDialect()), CLowering.REJECTED


def _kunlun_coverage():
    from targets.kunlun.codegen.dialect import KunlunDialect
    from targets.kunlun.codegen.lowering import KunlunLowering
    return KunlunLowering.covered_ops(KunlunDialect()), KunlunLowering.REJECTED


def _gpu_coverage():
    from targets.gpu import spelling
    return spelling.COVERED, spelling.REJECTED


@pytest.mark.parametrize("renderer", [_cpu_coverage, _kunlun_coverage, _gpu_coverage],
                         ids=["cpu", "kunlun", "gpu"])
def test_every_renderer_covers_or_rejects_every_op(renderer):
    covered, rejected = renderer()
    assert not set(covered) & set(rejected), "an op is both covered and rejected"
    missing = set(OPS) - set(covered) - set(rejected)
    assert not missing, f"ops neither rendered nor explicitly rejected: {sorted(missing)}"
    assert all(isinstance(why, str) and why for why in rejected.values())
