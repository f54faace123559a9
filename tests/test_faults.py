"""Faults of the compiler keep their traces (compiler/faults.py): a mistake in a kernel stays a
short CompilationError, an unexpected exception inside the compiler is an InternalError that says
it is a tilejit bug, raised from the original and written to the file it names, and TILEJIT_DEBUG
means the same in every place that reads it. Rendering only: no toolchain."""
from __future__ import annotations

import dataclasses
import pathlib
import re
import sys
import traceback

import pytest
import torch

import compiler
from compiler import dtypes as D, language as tl
from compiler.errors import CompilationError, InternalError
from compiler.ir import Op, TileType
from compiler.loader import LoadError, load_ref
from compiler.numerics import policy_of

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]
ON, OFF = ("1", "yes", "true"), (None, "", "0")
ZERO = tl.constexpr(0)


@compiler.kernel
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


@compiler.kernel
def divides_by_zero(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK // ZERO)    # a mistake in the kernel: Python raises ZeroDivisionError
    tl.store(x_ptr + offs, 1.0)


def _debug(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("TILEJIT_DEBUG", raising=False)
    else:
        monkeypatch.setenv("TILEJIT_DEBUG", value)


def _render(kfn, *args, **kw):
    with compiler.use_target("cpu"), compiler.render_only():
        kfn[(1,)](*args, **kw)


def _broken_pass(fn_ir):
    raise KeyError("no such value")   # what a bug in a pass raises


@pytest.mark.parametrize("debug", OFF)
def test_an_internal_error_says_it_is_a_bug_and_keeps_its_trace(monkeypatch, debug):
    _debug(monkeypatch, debug)
    monkeypatch.setattr("compiler.jit.optimize", _broken_pass)
    with pytest.raises(InternalError) as e:
        _render(scale, torch.zeros(8), 8, BLOCK=8)
    msg = str(e.value)
    assert "internal error in tilejit while lowering kernel 'scale' (a bug in tilejit, not in the kernel)" in msg
    assert "KeyError: 'no such value'" in msg and "TILEJIT_DEBUG=1 raises the original exception" in msg
    # the original is the cause, with its traceback down to the frame that raised it
    cause = e.value.__cause__
    assert isinstance(cause, KeyError)
    assert traceback.extract_tb(cause.__traceback__)[-1].name == "_broken_pass"
    # and the traceback is in the file the message names
    path = pathlib.Path(e.value.trace_file)
    assert str(path) in msg
    text = path.read_text()
    assert "in _broken_pass" in text and "KeyError: 'no such value'" in text and "kernel 'scale'" in text
    path.unlink()
    # what Python prints for it shows both: the compiler's frames are not lost
    printed = "".join(traceback.format_exception(e.type, e.value, e.tb))
    assert "in _broken_pass" in printed and "InternalError: internal error in tilejit" in printed


def test_the_autotuner_does_not_take_a_bug_for_a_config_it_cannot_build(monkeypatch, tmp_path):
    """Kunlun's cost model renders each candidate (no chip, no build): a fault while one lowers
    stops the tuning with the InternalError instead of rejecting the config with a one-line reason."""
    from compiler.autotune import tune_ops  # noqa: PLC0415
    _debug(monkeypatch, None)
    monkeypatch.setattr("compiler.jit.optimize", _broken_pass)
    with pytest.raises(InternalError, match="while lowering kernel 'rms_norm_kernel'") as e:
        tune_ops(["rms_norm"], {"rms_norm": [{"rows": 4, "N": 64}]}, target="kunlun:xpu2", cache_dir=tmp_path,
                 spaces={"rms_norm": [{"BLOCK": 32}]}, progress=False)
    pathlib.Path(e.value.trace_file).unlink()


@pytest.mark.parametrize("debug", ON)
def test_debug_raises_the_internal_error_as_it_is(monkeypatch, debug):
    _debug(monkeypatch, debug)
    monkeypatch.setattr("compiler.jit.optimize", _broken_pass)
    with pytest.raises(KeyError, match="no such value") as e:
        _render(scale, torch.zeros(8), 8, BLOCK=8)
    assert not isinstance(e.value, InternalError)


def test_an_ir_that_fails_verification_is_an_internal_error(monkeypatch):
    """The verifier's IRError is the compiler's fault, not the kernel's: it keeps its trace too."""
    _debug(monkeypatch, None)

    def mistyped_add(fn_ir):   # a pass that builds an op whose result type disagrees with its rule
        n = fn_ir.params[1].value
        fn_ir.body.ops.insert(0, Op("add", [n, n], [TileType(D.float32)]))
    monkeypatch.setattr("compiler.jit.optimize", mistyped_add)
    with pytest.raises(InternalError, match=r"while lowering kernel 'scale' \(a bug in tilejit.*IRError") as e:
        _render(scale, torch.zeros(8), 8, BLOCK=8)
    assert isinstance(e.value.__cause__, compiler.IRError)
    pathlib.Path(e.value.trace_file).unlink()


@pytest.mark.parametrize("target", ["cpu", "kunlun:xpu2", "gpu:sm_90"])
def test_a_kernel_without_a_numerics_policy_is_refused_not_rendered_as_fast(target):
    """Targets render and build by the policy the kernel was lowered under (numerics.policy_of),
    never by a default: an IR that lost it is a tilejit bug, refused by name."""
    with compiler.use_target(target), compiler.numerics("strict"), compiler.render_only() as seen:
        scale[(1,)](torch.zeros(8), 8, BLOCK=8)
    ir, tgt = seen[0].ir, seen[0].target
    assert policy_of(ir) == "strict"
    lost = dataclasses.replace(ir, specialization={k: v for k, v in ir.specialization.items() if k != "numerics"})
    with pytest.raises(InternalError, match=r"kernel 'scale' reached its target without a numerics policy .*"
                                            r"found None.*a bug in tilejit") as e:
        tgt.render(lost)
    assert e.value.kernel == "scale"


@pytest.mark.parametrize("debug", OFF + ON)
def test_a_mistake_in_the_kernel_stays_short_and_debug_means_one_thing(monkeypatch, debug):
    """The frontend and the launch read TILEJIT_DEBUG alike: "0" is off in both."""
    _debug(monkeypatch, debug)
    if debug in ON:   # the compiler's frames: the original exception, raised where it happened
        with pytest.raises(ZeroDivisionError) as e:
            _render(divides_by_zero, torch.zeros(8), BLOCK=8)
        assert any(f.filename.endswith("frontend.py") for f in traceback.extract_tb(e.tb))
        return
    with pytest.raises(CompilationError) as e:
        _render(divides_by_zero, torch.zeros(8), BLOCK=8)
    assert "in kernel 'divides_by_zero': ZeroDivisionError" in str(e.value)
    assert "tilejit" not in str(e.value).split("\n")[0].split("in kernel")[1]   # not called a bug
    assert e.value.__cause__ is None and e.value.__suppress_context__
    frames = traceback.extract_tb(e.tb)   # the launch's frame at most, none of the frontend's
    assert not any(pathlib.Path(f.filename).parent == REPO / "compiler" and f.filename.endswith(("frontend.py",
                   "faults.py")) for f in frames), frames


def test_tilejit_debug_is_read_in_one_place():
    """One meaning: compiler/faults.py is the only code that reads the variable."""
    readers = sorted(str(p.relative_to(REPO)) for pkg in ("compiler", "targets", "kernels", "runtime")
                     for p in (REPO / pkg).rglob("*") if p.suffix in (".py", ".c", ".h")
                     and re.search(r"getenv\(\s*\"TILEJIT_DEBUG|environ[^\n]*TILEJIT_DEBUG", p.read_text()))
    assert readers == ["compiler/faults.py"], readers


def test_a_plugin_module_that_fails_keeps_its_traceback(tmp_path, monkeypatch):
    (tmp_path / "tj_broken_plugin.py").write_text("import math\nVALUE = math.nonexistent\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LoadError, match=r"target 'tj_broken_plugin:VALUE' failed to load: AttributeError") as e:
        load_ref("tj_broken_plugin:VALUE", "target")
    assert isinstance(e.value.__cause__, AttributeError)
    assert any(f.filename.endswith("tj_broken_plugin.py") for f in traceback.extract_tb(e.value.__cause__.__traceback__))
    sys.modules.pop("tj_broken_plugin", None)
    # a reference that names nothing is the user's mistake: short, no cause
    for ref in ("tj_no_such_module:X", "compiler.loader:no_such_attr"):
        with pytest.raises(LoadError) as e:
            load_ref(ref, "target")
        assert e.value.__cause__ is None and e.value.__suppress_context__
