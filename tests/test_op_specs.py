"""Library ops as op specs: a new op is one file in kernels/, and the tools find it with no edit
elsewhere: `python -m compiler.autotune` tunes it and reports it in its table, and config_for gives
it a default on every target (by the target's tile class, never its name)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import kernels
from compiler import get_target
from compiler.opspec import library_ops

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[1]

TOY_OP = textwrap.dedent('''
    """toy_scale: y = x * a, a toy elementwise op with its spec (a test writes this file)."""
    import torch

    from compiler import kernel, language as tl
    from compiler.opspec import OpSpec, Problem, Work, npow2

    from .checks import cdiv
    from .configs import select


    @kernel
    def toy_scale_kernel(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * a, mask=m)


    def toy_scale(x, a, *, config=None):
        y = torch.empty_like(x)
        cfg = dict(config) if config else select(SPEC, None, N=x.numel())
        toy_scale_kernel[(cdiv(x.numel(), cfg["BLOCK"]),)](x, y, float(a), x.numel(), **cfg)
        return y


    def _problem(s):
        x = torch.randn(s["N"], generator=torch.Generator().manual_seed(0))
        return Problem(run=lambda cfg: toy_scale(x, 3.0, config=cfg), ref=lambda: x.double() * 3.0,
                       eager=lambda: x * 3.0)


    SPEC = OpSpec(
        name="toy_scale", key_dims={"N": "pow2"},
        space=({"BLOCK": 64}, {"BLOCK": 256}, {"BLOCK": 1024}),
        defaults={"cache": {"BLOCK": 1024}, "scratchpad": {"BLOCK": 256}},
        clamp=lambda cfg, dims: {"BLOCK": min(cfg["BLOCK"], max(16, npow2(dims["N"])))},
        dims_of=lambda s: {"N": s["N"]}, problem=_problem, describe=lambda s: f"[{s['N']}]",
        probe=lambda cfg, s: toy_scale(torch.empty(2 * cfg["BLOCK"] + 1), 2.0, config=cfg),
        work=lambda cfg, s: Work(programs=cdiv(s["N"], cfg["BLOCK"]), elements=2 * cfg["BLOCK"], segments=2,
                                 flops=cfg["BLOCK"]),
        tune_shapes=({"N": 1 << 16},), quick_shapes=({"N": 5000},))
    SPECS = (SPEC,)
''')

CHECK = textwrap.dedent('''
    import torch, kernels
    from compiler import get_target, use_target
    from kernels.toy_scale import toy_scale
    for name in ("cpu", "kunlun:xpu3", "gpu:sm_90", "gpu:interpret"):
        print(name, kernels.config_for("toy_scale", name, N=5000))
    x = torch.randn(5000)
    for name in ("cpu", "kunlun:xpu3", "gpu:interpret"):
        with use_target(name):
            assert torch.equal(toy_scale(x, 3.0), x * 3.0), name
    print("TOY OP OK")
''')


@pytest.fixture(scope="module")
def repo_with_toy_op(tmp_path_factory):
    """A copy of the repository's tracked files with one new file: kernels/toy_scale.py."""
    dest = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if f.split("/")[0] in ("compiler", "kernels", "targets", "runtime"):
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    (dest / "kernels" / "toy_scale.py").write_text(TOY_OP)
    return dest


def _run(repo, args, cache):
    env = {**os.environ, "PYTHONPATH": str(repo), "TILEJIT_CACHE_DIR": str(cache)}
    env.pop("TILEJIT_CACHE_STRICT", None)
    return subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_a_new_op_file_is_tuned_and_reported_by_the_autotuner(repo_with_toy_op, tmp_path):
    res = _run(repo_with_toy_op, ["-m", "compiler.autotune", "--target", "cpu", "--kernels", "toy_scale", "--quick",
                                  "--repeat", "1"], tmp_path / "cache")
    assert res.returncode == 0, res.stdout + res.stderr
    row = next(line for line in res.stdout.splitlines() if line.startswith("toy_scale"))
    assert "[5000]" in row and "N=8192" in row and "BLOCK=" in row and "measured" in row, res.stdout
    assert list((tmp_path / "cache" / "autotune").glob("toy_scale.cpu.*.fast.json"))


def test_a_new_op_file_gets_defaults_and_runs_on_every_target(repo_with_toy_op, tmp_path):
    res = _run(repo_with_toy_op, ["-c", CHECK], tmp_path / "cache")
    assert res.returncode == 0, res.stdout + res.stderr
    cfgs = dict(line.split(" ", 1) for line in res.stdout.splitlines() if line.startswith(("cpu", "kunlun", "gpu")))
    assert cfgs["cpu"] == "{'BLOCK': 1024}" and cfgs["kunlun:xpu3"] == "{'BLOCK': 256}"   # cache / scratchpad
    assert cfgs["gpu:sm_90"] == "{'BLOCK': 1024}"   # no simt default declared: the cache class's
    assert "TOY OP OK" in res.stdout


@pytest.mark.no_toolchain
def test_the_library_ops_are_found_through_their_specs():
    specs = library_ops()
    assert {"matmul", "layer_norm", "rms_norm", "add_rms_norm", "attention"} <= set(specs)
    assert specs is library_ops() and all(kernels.OP_SPECS[n] is s for n, s in specs.items() if n in kernels.OP_SPECS)
    for spec in specs.values():
        assert spec.tune_shapes and spec.quick_shapes and "cache" in spec.defaults
        for shape in spec.quick_shapes:
            dims = spec.dims_of(shape)
            for target in ("cpu", "kunlun:xpu2", "gpu:sm_90"):
                caps = get_target(target).caps
                cfg = spec.launched(spec.default_config(caps, dims), dims, "fast")
                assert spec.launched(cfg, dims, "fast") == cfg   # clamps are idempotent
                assert spec.effective(cfg, dims, "fast")[1] is None   # a default is never pruned


@pytest.mark.no_toolchain
def test_strict_fixes_the_order_parameter_and_prunes_other_values():
    spec = kernels.OP_SPECS["rms_norm"]
    eff, why = spec.effective({"BLOCK": 512}, {"N": 4096}, "strict")
    assert eff["BLOCK"] == 128 and why == "strict fixes BLOCK=128 on every target"
    eff, why = spec.effective({"BLOCK": 512}, {"N": 100}, "fast")
    assert eff["BLOCK"] == 128 and "runs as BLOCK=128" in why
    att = kernels.OP_SPECS["attention"]
    eff, why = att.effective({"BLOCK_M": 64, "BLOCK_N": 32}, {"head_dim": 64, "seq_k": 512, "seq_q": 1}, "fast")
    assert eff["BLOCK_M"] == 1 and why is None   # BLOCK_M changes no bits: it may follow seq_q
