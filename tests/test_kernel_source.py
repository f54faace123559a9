"""Kernels whose source is not in a file (compiler/source.py): made by exec() of a string (the
text recovered from the exec's caller), registered in linecache, given with keep_source, or
replaced as Triton's `JITFunction._unsafe_update_src` does; the cache key stays the IR's hash."""
import collections
import inspect
import linecache
import textwrap

import pytest
import torch

from compiler import CompilationError, keep_source, kernel, source
from compiler import language as tl
from compiler import triton

pytestmark = pytest.mark.compile


@triton.jit
def template(X, Z, N: tl.constexpr):
    off = tl.arange(0, N)
    x = tl.load(X + off)  # noqa: F841 - read by the replaced text
    tl.store(Z + off, GENERATE_HERE)  # noqa: F821 - replaced before it compiles


def patch_by_exec(tmpl, expr):
    """Triton's patch_kernel under its interpreter: the edited text exec'd, decorator and all."""
    ns = {}
    src = textwrap.dedent(inspect.getsource(tmpl.fn)).replace("GENERATE_HERE", expr)
    exec(src, globals(), ns)  # noqa: S102
    return ns[tmpl.fn.__name__]


def patch_by_src(tmpl, expr):
    """Triton's patch_kernel when compiling: a new JITFunction whose source is replaced."""
    k = triton.JITFunction(tmpl.fn)
    k._unsafe_update_src(k.src.replace("GENERATE_HERE", expr))
    return k


def _run(k, n=8):
    x = torch.arange(n, dtype=torch.float32)
    z = torch.empty(n)
    ck = k[(1,)](x, z, N=n)
    return z, ck


@pytest.mark.parametrize("patch", [patch_by_exec, patch_by_src])
def test_kernel_from_edited_source(patch):
    z, _ = _run(patch(template, "x * 3 + 1"))
    assert z.tolist() == [3.0 * i + 1 for i in range(8)]


def test_same_text_from_two_origins_shares_the_cache_entry():
    _, a = _run(patch_by_exec(template, "x - 2"))
    _, b = _run(patch_by_src(template, "x - 2"))
    _, c = _run(patch_by_exec(template, "x - 3"))
    assert a.key == b.key != c.key


def test_template_itself_keeps_its_source():
    k = patch_by_src(template, "x + 5")
    assert "x + 5" in k.src and "GENERATE_HERE" in triton.JITFunction(template.fn).src
    assert k.src.startswith("def template(")   # Triton's .src: from `def`, no decorator


def test_error_in_exec_source_shows_its_line():
    k = patch_by_exec(template, "x + not_defined_anywhere")
    with pytest.raises(CompilationError) as e:
        _run(k)
    msg = str(e.value)
    assert "not_defined_anywhere" in msg and "tl.store(Z + off, x + not_defined_anywhere)" in msg
    assert msg.startswith("<string>#")


def test_replacing_a_helper_recompiles_its_callers():
    ns = {"triton": triton, "tl": tl}
    # the text is an argument of exec, in no local: the front door kept it (compiler.source.watch_exec)
    exec(textwrap.dedent("""
        @triton.jit
        def helper(x):
            return x + 1

        @triton.jit
        def outer(X, Z, N: tl.constexpr):
            off = tl.arange(0, N)
            tl.store(Z + off, helper(tl.load(X + off)))
    """), ns)  # noqa: S102
    helper, outer = ns["helper"], ns["outer"]
    assert _run(outer)[0][:3].tolist() == [1.0, 2.0, 3.0]
    helper._unsafe_update_src(helper.src.replace("x + 1", "x * 10"))
    assert _run(outer)[0][:3].tolist() == [0.0, 10.0, 20.0]


def test_source_registered_in_linecache():
    """A code generator that writes its text into linecache (as Inductor does) needs nothing else."""
    name = "<generated kernels 1>"
    text = "def gen(X, Z, N: tl.constexpr):\n    off = tl.arange(0, N)\n    tl.store(Z + off, tl.load(X + off) * 7)\n"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    ns = {"tl": tl}
    exec(compile(text, name, "exec"), ns)  # noqa: S102
    fn = ns["gen"]
    del text   # not in this frame's locals any more: the linecache entry is the only copy
    assert _run(kernel(fn))[0][:3].tolist() == [0.0, 7.0, 14.0]


def _make_lost():
    ns = {}
    exec("def lost(X, Z, N: tl.constexpr):\n    tl.store(Z, tl.load(X))\n", {"tl": tl}, ns)  # noqa: S102
    return ns["lost"]


def test_unrecoverable_source_says_what_to_do_and_keep_source_fixes_it(monkeypatch):
    fn = _make_lost()   # exec'd in a frame that is gone: nothing holds its text
    monkeypatch.setattr(source, "_COMPILED", collections.deque())   # as if exec'd before the front door came
    k = kernel(fn)
    with pytest.raises(CompilationError, match="keep_source"):
        _run(k)
    keep_source(k, "def lost(X, Z, N: tl.constexpr):\n    off = tl.arange(0, N)\n"
                   "    tl.store(Z + off, tl.load(X + off) + 0.5)\n")
    assert _run(k)[0][:2].tolist() == [0.5, 1.5]


def test_a_wrong_text_in_the_callers_locals_is_not_taken(monkeypatch):
    """Only a text that compiles to the very same code object is used."""
    decoy = "def shadow(X, Z, N: tl.constexpr):\n    tl.store(Z, tl.load(X) * 1000)\n"   # noqa: F841
    ns = {}
    real = "def shadow(X, Z, N: tl.constexpr):\n    off = tl.arange(0, N)\n    tl.store(Z + off, tl.load(X + off))\n"
    exec(real, {"tl": tl}, ns)  # noqa: S102
    del real
    monkeypatch.setattr(source, "_COMPILED", collections.deque())
    k = kernel(ns["shadow"])   # decorated outside the exec: only the decoy is in reach
    assert k.kept_source is None
    with pytest.raises(CompilationError, match="cannot read the source"):
        _run(k)
