"""`@kernel` dispatch: specialisation keys, argument binding, target selection, helper inlining,
the CompiledKernel surface, stable cache keys, and GIL release during a launch.

Everything runs on the `cpu` target with real compiles (the session cache from conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import compiler
from compiler import CompiledKernel, KernelArgumentError, TargetError, kernel, language as tl
from compiler.cache import STATS

from flag_kernels import PATIENCE, compile_both, set_flag, wait_for_flag  # tests/ is on sys.path (conftest.py lives there)

pytestmark = pytest.mark.compile

REPO = pathlib.Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------
@kernel
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


@kernel
def scaled(x_ptr, out_ptr, n, scale=3.0, BLOCK: tl.constexpr = 64):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)


@kernel
def _affine(v):
    return v * 2.0 + 1.0


@kernel
def uses_helper(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, _affine(tl.load(x_ptr + offs, mask=m)), mask=m)


@kernel(target="cpu")
def pinned_add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


def _grid(n, block):
    return (compiler.cdiv(n, block),)


def _run_add_one(n, block=64, size=64):
    x = torch.randn(size)
    out = torch.zeros(size)
    ck = add_one[_grid(n, block)](x, out, n, BLOCK=block)
    torch.testing.assert_close(out[:n], x[:n] + 1.0, rtol=0, atol=0)
    assert torch.all(out[n:] == 0), "the mask let a store past n through"
    return ck


# --------------------------------------------------------------------------------------------
# specialisation
# --------------------------------------------------------------------------------------------
def test_int_specialisation_one_div16_other_are_distinct_entries():
    add_one.compiled.clear()
    ck1 = _run_add_one(1)
    ck32 = _run_add_one(32)
    ck33 = _run_add_one(33)
    assert len(add_one.compiled) == 3, list(add_one.compiled)
    assert len({id(ck1), id(ck32), id(ck33)}) == 3
    assert len({ck1.key, ck32.key, ck33.key}) == 3
    # each lands in its own entry: another value of the same class reuses it
    assert _run_add_one(48) is ck32
    assert _run_add_one(35) is ck33
    assert len(add_one.compiled) == 3
    # n == 1 is folded into the kernel: it is not a runtime parameter any more
    assert "%n" not in ck1.ir
    assert "%n" in ck33.ir


def test_constexpr_change_compiles_new_entry():
    add_one.compiled.clear()
    ck_a = _run_add_one(40, block=64)
    ck_b = _run_add_one(40, block=32)
    assert ck_a is not ck_b
    assert ck_a.key != ck_b.key
    assert len(add_one.compiled) == 2
    assert "64" in ck_a.ir and "32" in ck_b.ir


def test_same_call_twice_reuses_entry():
    x, out = torch.randn(100), torch.empty(100)
    ck1 = add_one[(2,)](x, out, 100, BLOCK=64)
    n_entries = len(add_one.compiled)
    builds = STATS.builds
    out.zero_()
    ck2 = add_one[(2,)](x, out, 100, BLOCK=64)
    assert isinstance(ck1, CompiledKernel)
    assert ck2 is ck1
    assert len(add_one.compiled) == n_entries
    assert STATS.builds == builds
    torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)


def test_callable_grid_receives_every_argument_by_name():
    x, out = torch.randn(200), torch.zeros(200)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (compiler.cdiv(meta["n"], meta["BLOCK"]),)

    add_one[grid](x, out, 200, BLOCK=64)
    assert len(seen) == 1
    meta = seen[0]
    assert set(meta) == {"x_ptr", "out_ptr", "n", "BLOCK"}
    assert meta["x_ptr"] is x and meta["out_ptr"] is out
    assert meta["n"] == 200 and meta["BLOCK"] == 64
    torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)  # 4 programs ran, not 1


# --------------------------------------------------------------------------------------------
# argument binding
# --------------------------------------------------------------------------------------------
def test_keyword_arguments_and_defaults():
    x = torch.randn(100)
    out = torch.zeros(100)
    scaled[(2,)](x_ptr=x, out_ptr=out, n=100)  # scale=3.0, BLOCK=64 from the defaults
    torch.testing.assert_close(out, x * 3.0)
    out.zero_()
    scaled[(4,)](x, out, n=100, BLOCK=32, scale=0.5)
    torch.testing.assert_close(out, x * 0.5)
    seen = []
    scaled[lambda m: seen.append(m) or (compiler.cdiv(m["n"], m["BLOCK"]),)](x, out, 100)
    assert seen[0]["scale"] == 3.0 and seen[0]["BLOCK"] == 64


@pytest.mark.no_toolchain
@pytest.mark.parametrize("args", [
    pytest.param(2, id="too-few"),
    pytest.param(6, id="too-many"),
])
def test_wrong_number_of_arguments(args):
    x, out = torch.randn(8), torch.empty(8)
    full = [x, out, 8, 64, 99, 100]
    with pytest.raises(KernelArgumentError, match="add_one"):
        add_one[(1,)](*full[:args])


@pytest.mark.no_toolchain
def test_unknown_keyword_argument():
    x, out = torch.randn(8), torch.empty(8)
    with pytest.raises(KernelArgumentError, match=r"add_one.*\bbogus\b|\bbogus\b.*add_one"):
        add_one[(1,)](x, out, 8, BLOCK=64, bogus=1)


@pytest.mark.no_toolchain
@pytest.mark.parametrize("dtype", [torch.complex64, torch.float8_e4m3fnuz])
def test_unsupported_tensor_dtype_names_the_argument(dtype):
    x = torch.zeros(8, dtype=dtype)
    out = torch.empty(8)
    with pytest.raises(KernelArgumentError) as ei:
        add_one[(1,)](x, out, 8, BLOCK=64)
    msg = str(ei.value)
    assert "x_ptr" in msg and "add_one" in msg
    assert str(dtype).replace("torch.", "") in msg


@pytest.mark.no_toolchain
def test_calling_kernel_directly_points_to_grid_syntax():
    x = torch.randn(8)
    with pytest.raises(TypeError, match=r"\[grid\]"):
        add_one(x, x, 8, BLOCK=64)


# --------------------------------------------------------------------------------------------
# target selection
# --------------------------------------------------------------------------------------------
def test_use_target_context_manager():
    x, out = torch.randn(64), torch.zeros(64)
    with compiler.use_target("cpu") as t:
        assert t.name == "cpu"
        assert compiler.current_target() is t
        ck = add_one[(1,)](x, out, 64, BLOCK=64)
    torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)
    assert any(k[0] == "cpu" and v is ck for k, v in add_one.compiled.items())
    with pytest.raises(TargetError):
        with compiler.use_target("nosuch"):
            pass


@pytest.mark.no_toolchain
def test_get_target_unknown_lists_available():
    with pytest.raises(TargetError) as ei:
        compiler.get_target("nosuch")
    msg = str(ei.value)
    assert "nosuch" in msg
    assert re.search(r"\bcpu\b", msg), msg
    assert "cpu" in compiler.available_targets()


def test_kernel_pinned_target():
    assert pinned_add_one.target is not None and pinned_add_one.target.name == "cpu"
    x, out = torch.randn(50), torch.zeros(50)
    ck = pinned_add_one[(1,)](x, out, 50, BLOCK=64)
    torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)
    assert all(k[0] == "cpu" for k in pinned_add_one.compiled)
    assert ck in pinned_add_one.compiled.values()


_BAD_TARGET_SCRIPT = """
import sys, torch
sys.path.insert(0, {repo!r})
from compiler import kernel, language as tl

@kernel
def k(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))

print("defined", flush=True)
k[(1,)](torch.empty(16), BLOCK=16)
print("launched", flush=True)
"""


@pytest.mark.integration
def test_tilejit_target_env_unknown_fails_at_launch(tmp_path):
    script = tmp_path / "bad_target.py"
    script.write_text(_BAD_TARGET_SCRIPT.format(repo=str(REPO)))
    env = dict(os.environ, TILEJIT_TARGET="nosuch", TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "defined" in res.stdout, "import/decoration must not fail: the target is read at the first launch"
    assert "launched" not in res.stdout
    assert "TargetError" in res.stderr, res.stderr
    assert "nosuch" in res.stderr and re.search(r"\bcpu\b", res.stderr), res.stderr


# --------------------------------------------------------------------------------------------
# helper inlining
# --------------------------------------------------------------------------------------------
def test_helper_kernel_is_inlined():
    x, out = torch.randn(100), torch.zeros(100)
    ck = uses_helper[(2,)](x, out, 100, BLOCK=64)
    torch.testing.assert_close(out, x * 2.0 + 1.0)
    entry = next(v for v in uses_helper.compiled.values() if v is ck)
    for text in (entry.ir, entry.ir_before):
        assert not re.search(r"\bcall\b", text), text
        assert "_affine" not in text, text
    assert "mul" in entry.ir and "add" in entry.ir


# --------------------------------------------------------------------------------------------
# CompiledKernel surface, stable keys
# --------------------------------------------------------------------------------------------
def test_compiled_kernel_texts():
    x, out = torch.randn(64), torch.zeros(64)
    ck = add_one[(1,)](x, out, 64, BLOCK=64)
    for attr in ("ir", "ir_before", "source", "key"):
        assert isinstance(getattr(ck, attr), str) and getattr(ck, attr), attr
    assert "#pragma omp" in ck.source
    assert "add_one" in ck.ir and "add_one" in ck.source
    assert re.fullmatch(r"[0-9a-f]+", ck.key)


_STABLE_MODULE = '''
from compiler import kernel, language as tl


@kernel
def stable_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(out_ptr + offs, tl.exp(v) * 0.5 + tl.sum(v, axis=0), mask=m)
'''

_STABLE_CHILD = """
import json, sys
sys.path[:0] = [{repo!r}, {mod_dir!r}]
import torch
from stable_mod import stable_kernel
x = torch.randn(100)
ck = stable_kernel[(1,)](x, torch.empty(100), 100, BLOCK=128)
print(json.dumps({{"ir": ck.ir, "ir_before": ck.ir_before, "key": ck.key, "source": ck.source}}))
"""


@pytest.mark.integration
def test_ir_and_key_stable_across_processes(tmp_path):
    (tmp_path / "stable_mod.py").write_text(_STABLE_MODULE)
    script = tmp_path / "child.py"
    script.write_text(_STABLE_CHILD.format(repo=str(REPO), mod_dir=str(tmp_path)))
    outs = []
    for seed in ("1", "2"):  # different str hashing in each process
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        outs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    a, b = outs
    assert a["ir_before"] == b["ir_before"]
    assert a["ir"] == b["ir"]
    assert a["source"] == b["source"]
    assert a["key"] == b["key"]


def _import_from(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def test_key_independent_of_file_and_line(tmp_path):
    body = textwrap.dedent(_STABLE_MODULE)
    (tmp_path / "where_a.py").write_text(body)
    shifted = body.replace("\n\n@kernel", "\n" + "# padding\n" * 37 + "\n\n@kernel")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "where_b.py").write_text("'''another module'''\nimport os  # noqa\n" + shifted)
    mod_a = _import_from(tmp_path / "where_a.py", "tilejit_test_where_a")
    mod_b = _import_from(tmp_path / "sub" / "where_b.py", "tilejit_test_where_b")
    try:
        ka, kb = mod_a.stable_kernel, mod_b.stable_kernel
        assert ka.fn.__code__.co_firstlineno != kb.fn.__code__.co_firstlineno
        assert ka.fn.__code__.co_filename != kb.fn.__code__.co_filename
        x = torch.randn(100)
        out_a, out_b = torch.empty(100), torch.empty(100)
        ck_a = ka[(1,)](x, out_a, 100, BLOCK=128)
        ck_b = kb[(1,)](x, out_b, 100, BLOCK=128)
        assert ck_a is not ck_b
        assert ck_a.key == ck_b.key
        assert ck_a.ir == ck_b.ir
        torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)
    finally:
        sys.modules.pop("tilejit_test_where_a", None)
        sys.modules.pop("tilejit_test_where_b", None)


# --------------------------------------------------------------------------------------------
# GIL release
# --------------------------------------------------------------------------------------------
def _spinning_launch():
    """(flag, out, thread): a thread inside a wait_for_flag launch that has started spinning, as
    seen from this thread (which, were the GIL held through the launch, could not look until the
    spin gave up)."""
    compile_both()
    flag, started = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    out = torch.full((1,), -1, dtype=torch.int32)
    th = threading.Thread(target=lambda: wait_for_flag[(1,)](flag, started, out, PATIENCE))
    th.start()
    while started.item() == 0 and th.is_alive():
        time.sleep(0.0005)
    return flag, out, th


def test_launch_releases_gil_two_threads_overlap():
    """A launch in another thread spins until a launch from this thread sets a flag."""
    flag, out, th = _spinning_launch()
    set_flag[(1,)](flag)
    th.join()
    assert out.item() == 1, "the spinning launch never saw the other launch's flag: GIL held during the launch?"


def test_launch_releases_gil_python_keeps_running():
    """While one thread is inside a launch, this thread keeps executing Python: a plain tensor
    write is what ends the other thread's launch."""
    flag, out, th = _spinning_launch()
    flag[0] = 1
    th.join()
    assert out.item() == 1, "the spinning launch never saw the flag Python wrote: GIL held during the launch?"


def test_constexprs_that_compare_equal_but_differ_in_type_compile_separately():
    @kernel
    def scale(out_ptr, C: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, 4), tl.arange(0, 4) * C)

    o = torch.empty(4)
    scale[(1,)](o, 2 ** 30)            # int32 arithmetic: wraps
    assert o[2].item() == -(2.0 ** 31)
    scale[(1,)](o, float(2 ** 30))     # fp32 arithmetic: must not reuse the int specialisation
    assert o[2].item() == 2.0 ** 31
    with pytest.raises(KernelArgumentError, match="hashable"):
        scale[(1,)](o, [1])


def test_optional_pointer_idiom_is_not_none():
    """Triton's idiom: a pointer argument may be None (a constexpr) and is tested with `is not None`."""
    @kernel
    def scale(x_ptr, w_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        if w_ptr is not None:
            x = x * tl.load(w_ptr + offs)
        tl.store(x_ptr + offs, x)

    x = torch.full((16,), 2.0)
    scale[(1,)](x, torch.full((16,), 3.0), BLOCK=16)
    assert torch.equal(x, torch.full((16,), 6.0))
    scale[(1,)](x, None, BLOCK=16)
    assert torch.equal(x, torch.full((16,), 6.0))
