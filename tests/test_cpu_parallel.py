"""The cpu target's grain rule (tj_run_programs in targets/cpu/tilejit_cpu.h, settings in
targets/cpu/parallel.py): whether a launch runs its programs on the calling thread or across a
team of 1, 2 or 3 threads changes no bit of any output, under both numerics policies; and the
settings do decide which launches go parallel."""
import math

import pytest
import torch

from compiler import kernel, language as tl, numerics
from compiler.errors import TargetError
from kernels.activation import silu_and_mul
from targets.cpu import parallel

pytestmark = pytest.mark.compile

# (threads, grain in us): every launch parallel on 1..3 threads, none parallel, the default rule
SETTINGS = ((1, 0), (2, 0), (3, 0), (2, math.inf), (0, parallel.DEFAULT_GRAIN_US))


@kernel
def _softmax_rows(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    """exp, a run-time loop and a reduction (sequential in fast, a tree in strict) per row."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        c = start + tl.arange(0, BLOCK)
        acc += tl.exp(tl.load(x_ptr + row * N + c, mask=c < N, other=-float("inf")))
    s = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + c, mask=c < N, other=0.0)
        tl.store(y_ptr + row * N + c, tl.exp(x) / s, mask=c < N)


def _softmax(x):
    y = torch.empty_like(x)
    _softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=64)
    return y


@pytest.fixture
def restore():
    previous = parallel.configure()
    yield
    parallel.configure(**previous)


@pytest.mark.parametrize("policy", ("fast", "strict"))
def test_bits_do_not_depend_on_threads_or_grain(policy, restore):
    x = torch.randn(37, 300, generator=torch.Generator().manual_seed(0))
    xb = torch.randn(9, 2 * 1000, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    outs = []
    with numerics(policy):
        for threads, grain in SETTINGS:
            parallel.configure(grain_us=grain, threads=threads)
            before = parallel.counts()
            outs.append((_softmax(x), silu_and_mul(xb, config={"BLOCK": 64})))
            after = parallel.counts()
            went_parallel = after["parallel"] - before["parallel"]
            if grain == 0 and threads > 1:
                assert went_parallel == 2, (threads, grain, before, after)
            elif threads == 1 or grain == math.inf:
                assert went_parallel == 0 and after["serial"] - before["serial"] == 2, (threads, grain)
    for (threads, grain), out in zip(SETTINGS[1:], outs[1:]):
        for got, ref in zip(out, outs[0]):
            assert torch.equal(got, ref), f"{policy}: {threads} threads, grain {grain} us changed bits"


@pytest.mark.no_toolchain
@pytest.mark.parametrize("raw", ("abc", "-1", "nan"))
def test_a_bad_grain_is_refused_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("TILEJIT_CPU_GRAIN_US", raw)
    with pytest.raises(TargetError, match="TILEJIT_CPU_GRAIN_US"):
        parallel._grain_from_env()
    with pytest.raises(TargetError, match="threads"):
        parallel.configure(threads=-1)


@pytest.mark.no_toolchain
def test_the_grain_reads_microseconds(monkeypatch, restore):
    monkeypatch.setenv("TILEJIT_CPU_GRAIN_US", "12.5")
    assert parallel._grain_from_env() == 12500
    parallel.configure(grain_us=math.inf, threads=3)
    assert parallel.settings() == {"grain_us": math.inf, "threads": 3}
