"""Launches that used to crash, wrap or lie: each case of reliability_child.py runs in a child
process (a crash there fails the case, not the test run), on both launch paths - the compiled one
(compiler.fastpath) and the Python one (TILEJIT_FAST_LAUNCH=0) - and, for out-of-bounds
accesses, in the cpu target's bounds-checked mode. Each asserts a clear error or the right result.
"""
from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

import compiler
from compiler import kernel, language as tl

pytestmark = pytest.mark.integration

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
CHILD = HERE / "reliability_child.py"

LAUNCH_CASES = ["meta_after_cpu_launch", "fake_tensor_kernel", "fake_tensor_library_op", "sparse_tensor",
                "block_2_31", "trip_count", "step_zero", "captured_global", "matmul_out_alias",
                "matmul_out_expanded", "attention_nan", "attention_head_dim_0", "norm_empty_rows",
                "grid_x2**31", "grid_y2**31", "grid_2**32+4", "grid_float", "grid_string", "grid_negative",
                "grid_four", "int_2**64", "int_2**63", "int_-2**63-1", "config_zero", "config_missing",
                "config_unknown", "kunlun_meta", "gpu_interpret_meta", "kunlun_trip_count",
                "gpu_interpret_trip_count"]
BOUNDS_CASES = ["oob_store", "oob_load", "oob_scalar_store", "oob_loop", "oob_view", "in_bounds_checked"]
MODES = {"compiled": {}, "python": {"TILEJIT_FAST_LAUNCH": "0"}}


def _run(cases, env_extra) -> dict:
    env = {**os.environ, **env_extra, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(CHILD), *cases], capture_output=True, text=True, env=env,
                          timeout=900, cwd=str(REPO))
    results, current = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("START "):
            current = line[6:]
        elif line.startswith("RESULT "):
            r = json.loads(line[7:])
            results[r["case"]] = r
            current = None
    if current is not None:   # the process died inside a case
        results[current] = {"case": current, "ok": False, "type": "crash",
                            "error": f"the child died (status {proc.returncode}): {proc.stderr[-1500:]}"}
    missing = [c for c in cases if c not in results]
    assert not missing or current, f"cases not run {missing}: {proc.stderr[-2000:]}"
    return results


@pytest.fixture(scope="module", params=list(MODES))
def launch(request):
    return request.param, _run(LAUNCH_CASES, MODES[request.param])


@pytest.fixture(scope="module", params=list(MODES))
def bounds(request):
    return request.param, _run(BOUNDS_CASES, {**MODES[request.param], "TILEJIT_CPU_BOUNDS_CHECK": "1"})


def _error(results, case, type_name, *fragments):
    r = results[case]
    assert not r["ok"], f"{case}: no error, got {r.get('result')}"
    assert type_name in r["bases"], f"{case}: {r['type']}: {r['error']}"
    for f in fragments:
        assert f in r["error"], f"{case}: {f!r} not in: {r['error']}"
    return r["error"]


def _result(results, case):
    r = results[case]
    assert r["ok"], f"{case}: {r['type']}: {r['error']}\n{r.get('trace', '')}"
    return r["result"]


# -- tensors a kernel cannot read: on the warm path as on the first launch --------------------------
def test_meta_tensor_after_a_cpu_launch_is_refused(launch):
    _error(launch[1], "meta_after_cpu_launch", "KernelArgumentError", "kernel 'add'", "'o_ptr'", "meta tensor")


def test_fake_tensor_is_refused_by_kernel_and_library_op(launch):
    _error(launch[1], "fake_tensor_kernel", "KernelArgumentError", "kernel 'add'", "'o_ptr'", "FakeTensor")
    # a library op is a torch operator: a FakeTensor dispatches to its fake implementation
    assert _result(launch[1], "fake_tensor_library_op") == {"fake": True, "shape": [2, 64]}


@pytest.mark.parametrize("case", ["kunlun_meta", "gpu_interpret_meta"])
def test_meta_tensor_is_refused_by_the_other_targets_warm_path(launch, case):
    _error(launch[1], case, "KernelArgumentError", "kernel 'add'", "'o_ptr'", "meta tensor")


def test_sparse_tensor_is_refused(launch):
    _error(launch[1], "sparse_tensor", "KernelArgumentError", "'x_ptr'", "sparse_coo", ".to_dense()")


# -- grids and ints the target cannot index ---------------------------------------------------------
@pytest.mark.parametrize("grid, fragment", [("x2**31", "grid axis 0 has 2147483648 programs"),
                                            ("y2**31", "grid axis 1 has 2147483648 programs"),
                                            ("2**32+4", "grid axis 0 has 4294967300 programs"),
                                            ("float", "grid axis 0 is float"), ("string", "grid axis 0 is str"),
                                            ("negative", "must be >= 0"), ("four", "1 to 3 dimensions")])
def test_bad_grids_get_clear_errors(launch, grid, fragment):
    _error(launch[1], f"grid_{grid}", "KernelArgumentError", "kernel 'store_pid'", fragment)


def test_block_of_2_31_is_a_compile_error(launch):
    _error(launch[1], "block_2_31", "CompilationError", "2147483648 elements", "smaller BLOCK")


@pytest.mark.parametrize("value", ["2**64", "2**63", "-2**63-1"])
def test_int_outside_64_bits_is_refused_not_truncated(launch, value):
    _error(launch[1], f"int_{value}", "KernelArgumentError", "argument 'n'", "64-bit range")


@pytest.mark.parametrize("case", ["trip_count", "kunlun_trip_count", "gpu_interpret_trip_count"])
def test_loop_trip_count_wider_than_int32(launch, case):
    assert _result(launch[1], case) == {"up": 4, "down": 4}


def test_runtime_step_of_zero_is_an_error(launch):
    _error(launch[1], "step_zero", "KernelArgumentError", "kernel 'count_iters'", "step of 0",
           "reliability_child.py:")


def test_changed_global_recompiles(launch):
    r = _result(launch[1], "captured_global")
    assert (r["before"], r["after"], r["again"]) == (2.0, 5.0, 5.0), r


# -- library ops --------------------------------------------------------------------------------------
def test_matmul_out_aliasing_an_input_or_itself_is_refused(launch):
    _error(launch[1], "matmul_out_alias", "ValueError", "overlaps the memory of input 'a'")
    _error(launch[1], "matmul_out_expanded", "ValueError", "share memory")


def test_attention_nan_propagates_and_head_dim_0(launch):
    r = _result(launch[1], "attention_nan")
    assert r == {"out_nan": True, "lse_nan": True, "ref_nan": True, "other_head_finite": True}, r
    r = _result(launch[1], "attention_head_dim_0")
    for causal in ("False", "True"):
        assert r[causal]["shape"] == [1, 2, 6, 0] and r[causal]["equal"], r
    assert abs(r["False"]["first"] - 1.3862943611) < 1e-6                     # log(4 keys)
    assert r["True"]["first"] == float("-inf") and abs(r["True"]["last"] - 1.3862943611) < 1e-6


def test_norms_over_empty_rows(launch):
    assert _result(launch[1], "norm_empty_rows")["shapes"] == [
        [[4, 0], [4, 0], [[4, 0], [4, 0]]], [[0, 8], [0, 8], [[0, 8], [0, 8]]],
        [[2, 0, 3], [2, 0, 3], [[2, 0, 3], [2, 0, 3]]]]


@pytest.mark.parametrize("kind, fragment", [("zero", "BLOCK_M=0 is not a positive block size"),
                                            ("missing", "lacks BLOCK_K"), ("unknown", "BLOK is not a parameter")])
def test_bad_configs_get_clear_errors(launch, kind, fragment):
    _error(launch[1], f"config_{kind}", "ValueError", "matmul: config", fragment)


# -- the bounds-checked mode --------------------------------------------------------------------------
@pytest.mark.parametrize("case, what, arg, offset, extent", [
    ("oob_store", "store to", "o_ptr", "offset 16", "[0, 16)"),
    ("oob_load", "load from", "x_ptr", "offset 10", "[0, 10)"),
    ("oob_scalar_store", "store to", "o_ptr", "offset -1", "[0, 8)"),
    ("oob_loop", "load from", "x_ptr", "offset 40", "[0, 40)")])
def test_out_of_bounds_access_is_an_error_naming_it(bounds, case, what, arg, offset, extent):
    msg = _error(bounds[1], case, "KernelBoundsError", what, f"argument '{arg}'", offset, extent,
                 "reliability_child.py:")
    assert "kernel '" in msg


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(CHILD.read_text().splitlines(), 1) if text in line)


@pytest.mark.integration
def test_overruns_of_a_view_inside_a_larger_buffer_are_caught(bounds):
    """Checked against the view, not its storage: a store past a 100-float view of a 256-float
    buffer is refused before it reaches the neighbour, as is a store past a column's last row."""
    res = _result(bounds[1], "oob_view")
    fix = ("Mask the access (e.g. mask=offs < n) or fix the offsets. The access was skipped; the outputs are "
           "incomplete. (bounds-checked launch: TILEJIT_CPU_BOUNDS_CHECK=1)")
    assert res["view"] == (
        f"kernel 'unmasked_store': store to argument 'o_ptr' at {CHILD}:{_line_of('offs.to(tl.float32)')} at "
        "element offset 100, outside its extent [0, 100) (the elements of its view, from its first to its last, "
        f"counted from its data pointer). {fix}")
    assert res["neighbour"] == 0.0
    assert res["column"] == (
        f"kernel 'strided_store': store to argument 'o_ptr' at {CHILD}:{_line_of('offs * stride, 1.0')} at "
        "element offset 32, outside its extent [0, 29) (the elements of its view, from its first to its last, "
        f"counted from its data pointer). {fix}")
    assert res["grid"] == 8.0


@kernel
def _fill_256(o_ptr, BLOCK: tl.constexpr):
    tl.store(o_ptr + tl.arange(0, BLOCK), 1.0)


@pytest.mark.emulation
def test_kunlun_emulation_refuses_a_copy_past_a_view_into_its_neighbour():
    """The host emulation's DMA check covers each tensor's view, not its storage."""
    import re
    from compiler import use_target
    buf = torch.zeros(256)
    with use_target("kunlun"), pytest.raises(Exception) as e:
        _fill_256[(1,)](buf[:100], BLOCK=256)
    assert type(e.value).__name__ == "KunlunBoundsError"
    msg = str(e.value)
    assert re.fullmatch(r"kernel '_fill_256' on kunlun:xpu3 \(host emulation\): store to argument 'o_ptr' at \S+:\d+ "
                        r"\(`.*`\) touches elements \[0, 256\) of it, outside its extent \[0, 100\) \(the elements of "
                        r"its view, from its first to its last\)\. .*LM2GM: GM address 0x[0-9a-f]+ \(\+1024 bytes\) is "
                        r"outside every tensor passed to the kernel \(cluster 0, core 0\)\)", msg, re.S), msg
    assert buf[100:].abs().sum().item() == 0.0


def test_in_bounds_accesses_pass_the_checks(bounds):
    assert _result(bounds[1], "in_bounds_checked") == {"equal": True}


def test_bounds_check_is_part_of_the_cache_key():
    from targets.cpu import CPUTarget
    plain, checked = CPUTarget(bounds_check=False), CPUTarget(bounds_check=True)
    assert plain.fingerprint() != checked.fingerprint()

    @kernel
    def k(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
    with compiler.render_only() as seen:
        k[(1,)](torch.empty(4), BLOCK=4)
    src = checked.render(seen[0].ir)
    assert "tj_bc(" in src and "tj_bc(" not in plain.render(seen[0].ir)


# -- the compiled warm path computes the key the Python path does -------------------------------------
@kernel
def _many(x_ptr, a, b, c, d, e, BLOCK: tl.constexpr, FLAG: tl.constexpr = False):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@pytest.mark.parametrize("args", [
    (1, 0, 16, -16, 2 ** 31), (2 ** 31 - 1, -2 ** 31, 2 ** 40, -(2 ** 40) - 1, 7),
    (1.5, True, False, None, 3), (2 ** 63 - 1, -2 ** 63, 2 ** 64, 0.0, -1)])
def test_compiled_key_equals_the_python_key(args):
    from compiler.fastpath import fast_module
    from compiler.jit import _constexpr_key, _spec_of
    if fast_module() is None:
        pytest.skip("the compiled launch path is unavailable here")
    x = torch.empty(4)
    _many[(1,)]   # makes the dispatcher
    d = _many._dispatch
    if any(type(a) is int and not -2 ** 63 <= a < 2 ** 63 for a in args):
        assert d.key(x, *args, BLOCK=4, FLAG=True) is None   # the Python path refuses it, naming it
        return
    want = ("cpu", compiler.current_policy(), *map(_spec_of, (x, *args)), *map(_constexpr_key, (4, True)))
    assert d.key(x, *args, BLOCK=4, FLAG=True) == want
    want_default = want[:-1] + (_constexpr_key(False),)
    assert d.key(x, *args, 4) == want_default


@kernel(do_not_specialize=["b"])
def _generated(x_ptr, a, b, c, d, BLOCK: tl.constexpr, MODE: tl.constexpr = "sum",
               FLAG: tl.constexpr = False):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


class _Int(int):
    pass


_RUNTIME_VALUES = [0, 1, -1, 2, 15, 16, 17, -16, 48, 2 ** 31 - 16, 2 ** 31 - 1, 2 ** 31, -2 ** 31,
                   -2 ** 31 - 1, 2 ** 32, 2 ** 40 + 1, 2 ** 63 - 16, 2 ** 63 - 1, -2 ** 63, 2 ** 63,
                   -2 ** 63 - 1, 0.0, -2.5, float("inf"), float("nan"), True, False, None, np.int64(3),
                   np.float32(1.0), _Int(16), "s",
                   *(torch.empty(2, dtype=dt) for dt in (torch.float32, torch.float16, torch.bfloat16,
                                                         torch.int32, torch.int64, torch.int8, torch.uint8,
                                                         torch.bool)),
                   torch.empty(4, 2).t()]
_CONSTEXPR_VALUES = [1, 4, 16, 1.0, True, False, None, "max", tl.float16, np.int32(4)]


def test_the_compiled_key_equals_the_python_key_on_generated_launches():
    """Every key rule, on 600 generated launches (seeded) over the targets and policies: the
    compiled warm path's key (`_dispatch.key`, what it looks up) is the Python path's key
    (`_launch_key`, what a miss stores under), or None where it hands the launch to Python: launch
    options, an int outside int64. A plain launch must not be handed over (it would run the slow
    path on every warm launch, silently)."""
    from compiler.fastpath import fast_module
    if fast_module() is None:
        pytest.skip("the compiled launch path is unavailable here")
    k = _generated
    k[(1,)]   # makes the dispatcher
    rng = random.Random(7)
    names = k.arg_names
    for case in range(600):
        values = [torch.empty(4)] + [rng.choice(_RUNTIME_VALUES) for _ in range(4)] \
            + [rng.choice(_CONSTEXPR_VALUES) for _ in range(3)]
        if rng.random() < 0.3:
            values = values[:-1]          # FLAG from its default
            if rng.random() < 0.5:
                values = values[:-1]      # and MODE
        cut = rng.randint(0, len(values))   # the rest by keyword, in a shuffled order
        args, kwargs = values[:cut], dict(zip(names[cut:], values[cut:]))
        kwargs = dict(rng.sample(sorted(kwargs.items()), len(kwargs)))
        options = rng.random() < 0.15
        if options:
            kwargs["num_warps"] = rng.choice([2, 4])
        target, policy = rng.choice(["cpu", "kunlun:xpu3", "gpu:interpret"]), rng.choice(["fast", "strict"])
        with compiler.use_target(target), compiler.numerics(policy):
            compiled = k._dispatch.key(*args, **kwargs)
            python = k._launch_key(tuple(args), kwargs)[0]
        ints = [v for v in values if type(v) is int]
        plain = not options and all(-2 ** 63 <= v < 2 ** 63 for v in ints)
        why = (case, target, policy, args, kwargs)
        assert compiled == python if plain else compiled in (None, python), why


@kernel(isCloseVectorization=True)
def _with_decorator_options(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 2.0)


@pytest.mark.emulation
def test_a_kernel_with_decorator_options_is_found_by_the_compiled_warm_path():
    """kunlun honours isCloseVectorization: the key of a launch with the decorator's options is the one
    the compiled warm path computes (it sees no options), so warm launches do not fall back to Python;
    a launch naming other options gets an entry of its own, one naming the decorator's shares it."""
    from compiler.fastpath import fast_module
    if fast_module() is None:
        pytest.skip("the compiled launch path is unavailable here")
    k = _with_decorator_options
    x = torch.zeros(4)
    with compiler.use_target("kunlun:xpu3"):
        k[(1,)](x, BLOCK=4)
        assert x.tolist() == [2.0] * 4
        assert list(k.compiled) == [k._dispatch.key(x, BLOCK=4)]
        k[(1,)](x, BLOCK=4, isCloseVectorization=True)
        assert len(k.compiled) == 1
        k[(1,)](x, BLOCK=4, isCloseVectorization=False)
        assert len(k.compiled) == 2 and k._dispatch.key(x, BLOCK=4) in k.compiled


def test_missing_python_headers_fall_back_with_a_note(monkeypatch, tmp_path):
    """Without Python.h the compiled launch path is not built; the reason names the package to
    install, and launches take the Python path (the `python` mode of the tests above)."""
    import sysconfig
    from compiler import fastpath
    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**real(*a, **k), "include": str(tmp_path)})
    mod, why = fastpath._try_load()
    assert mod is None and "Python's headers are not installed" in why and "-dev" in why
