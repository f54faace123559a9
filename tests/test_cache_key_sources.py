"""What counts as the compiler's sources for the kernel-cache key (compiler/version.py): editing
the doctor or a command line keeps every cached kernel, editing the compiler proper does not."""
from __future__ import annotations

import ast
import pathlib
import shutil

import pytest

from compiler.version import COMPILER_FILES_OUTSIDE_THE_KEY, compiler_source_hash, hash_sources

pytestmark = pytest.mark.no_toolchain

COMPILER = pathlib.Path(__file__).resolve().parents[1] / "compiler"


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    dst = tmp_path_factory.mktemp("key") / "compiler"
    shutil.copytree(COMPILER, dst, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return dst


def _key(d) -> str:
    return hash_sources(str(d), COMPILER_FILES_OUTSIDE_THE_KEY)


def test_the_key_leaves_out_the_doctor_and_the_command_lines(copy):
    assert compiler_source_hash() == _key(COMPILER)
    before = _key(copy)
    for rel in sorted(COMPILER_FILES_OUTSIDE_THE_KEY):
        path = copy / rel
        assert path.is_file(), f"compiler/{rel} is listed as outside the key but does not exist"
        path.write_text(path.read_text() + "\n# edited\n")
        assert _key(copy) == before, rel
    # the compiler proper stays in it: a pass, the frontend, a template-free helper, a new module
    for rel in ("passes.py", "frontend.py", "ir/printer.py", "cache/keys.py"):
        path = copy / rel
        text = path.read_text()
        path.write_text(text + "\n# edited\n")
        assert _key(copy) != before, rel
        path.write_text(text)
    assert _key(copy) == before
    (copy / "new_pass.py").write_text("X = 1\n")
    assert _key(copy) != before


def _imports(path: pathlib.Path) -> set[str]:
    """The absolute module names `path` (a module of compiler/) imports, `from x import y` as x.y too."""
    package = ["compiler", *path.relative_to(COMPILER).parent.parts]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] if node.level else [])
            mod = ".".join(p for p in (base, node.module or "") if p)
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return out


def test_the_code_outside_the_key_is_not_imported_by_the_compiler_proper():
    """A module the lowering imports could change bits: none imports a file left out of the key
    (but autotune's package, which re-exports the summary's formatting for its command line)."""
    outside = {"compiler." + rel.removesuffix(".py").replace("/", ".") for rel in COMPILER_FILES_OUTSIDE_THE_KEY}
    offenders = sorted(f"compiler/{p.relative_to(COMPILER).as_posix()} imports {m}"
                       for p in COMPILER.rglob("*.py")
                       if p.relative_to(COMPILER).as_posix() not in COMPILER_FILES_OUTSIDE_THE_KEY | {"autotune/__init__.py"}
                       for m in _imports(p) & outside)
    assert not offenders, offenders
    assert "compiler.doctor" in outside and "compiler.cache.cli" in outside   # the names resolve as imports do


def test_a_source_changed_under_a_running_process_is_reported(tmp_path, monkeypatch):
    from compiler import version
    monkeypatch.setattr(version, "_KEYED", dict(version._KEYED))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "kernel.cpp.j2").write_text("one\n")
    version.package_source_hash(str(pkg))
    assert str(pkg.resolve()) not in version.changed_sources()
    (pkg / "kernel.cpp.j2").write_text("two\n")
    assert str(pkg.resolve()) in version.changed_sources()


@pytest.mark.compile
def test_a_kernel_built_after_its_sources_changed_is_not_stored(tcache, monkeypatch):
    """A template or header read after the key was computed (an edit, an upgrade in place under a
    running server) would store a kernel under a key that does not describe it, and every later
    process would load it (a launch ABI that no longer matches corrupted memory): the build
    refuses, naming the directory, and the cache keeps nothing."""
    import torch

    from compiler import kernel, version
    from compiler import language as tl
    from compiler.cache import CacheError, KernelCache

    @kernel
    def add_one(X, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(X + o, tl.load(X + o) + 1)

    monkeypatch.setattr(version, "_KEYED", dict(version._KEYED))
    pkg = tcache.parent / "templates"
    pkg.mkdir()
    (pkg / "entry.j2").write_text("before\n")
    version.package_source_hash(str(pkg))          # as a target's fingerprint does
    (pkg / "entry.j2").write_text("after\n")        # changed before the build
    with pytest.raises(CacheError, match=r"kernel 'add_one': tilejit's own sources in .*templates changed while "
                                         r"this process was running .* Restart the process"):
        add_one[(1,)](torch.zeros(16), N=16)
    assert list(KernelCache(tcache).manifests()) == []
