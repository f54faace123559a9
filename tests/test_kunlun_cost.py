"""The Kunlun cost model prices what the memory plan emits: a config whose tiles only fit after
strip-mining re-reads tiles from GM once per chunk of another axis, and its estimate carries that
traffic (tune/cost_model.py, plan/model.py `dma_growth`)."""
from __future__ import annotations

import pytest

import kernels
from compiler import get_target, numerics
from targets.kunlun.plan.staging import team_size, votes_bytes
from targets.kunlun.tune import cost_model, footprint

pytestmark = pytest.mark.no_toolchain

PREFILL = dict(batch=1, heads=32, seq_q=512, seq_k=512, head_dim=128, causal=True)
# q [32, 128] fp32 alone is 16 KB, twice xpu2's LM: the plan cuts rows, keys and head_dim
CUT = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_DK": 32, "BLOCK_DO": 128}


@pytest.fixture(scope="module")
def xpu2():
    return get_target("kunlun:xpu2")


def _priced(tgt, cfg, shape):
    spec = kernels.OP_SPECS["attention"]
    with numerics("fast"):
        prof = footprint.profile(tgt, spec, cfg, shape, "fast")
        est = cost_model.estimate(tgt, spec, cfg, shape, "fast")
        work = spec.work(spec.launched(cfg, spec.dims_of(shape), "fast"), shape)
    return prof, est, work


def test_a_strip_mined_config_is_priced_with_its_re_reads(xpu2):
    prof, est, work = _priced(xpu2, CUT, PREFILL)
    assert prof.dma_bytes > 4 and prof.dma_transfers > 1, prof
    op_level = cost_model.estimate_time(xpu2.arch, work, prof.vector_share)
    assert est == pytest.approx(cost_model.estimate_time(xpu2.arch, work, prof.vector_share, prof.dma_bytes,
                                                         prof.dma_transfers))
    assert est > 3 * op_level, (est, op_level)


def test_a_config_that_fits_as_written_moves_what_the_kernel_names(xpu2):
    prof, est, work = _priced(xpu2, {"BLOCK_M": 4, "BLOCK_N": 16, "BLOCK_DK": 16, "BLOCK_DO": 32}, PREFILL)
    # the bytes as written; the rows of each multi-row tile are one asynchronous batch, waited for
    # once (the DMA setup the estimate prices per transfer is paid per batch)
    assert prof.dma_bytes == 1.0 and 0.5 < prof.dma_transfers < 1.0, prof
    # K and V are staged in SM (causal: its key loop is shadowed), read once per team of the 128
    # query blocks of a head: what the estimate prices on top of the kernel as written
    arch = xpu2.arch
    team = team_size(work.axis0, arch.cores_per_cluster, prof.sm_slot,
                     arch.sm_bytes_per_cluster - votes_bytes(arch.cores_per_cluster))
    assert (work.axis0, team) == (128, 64) and prof.shared_bytes > 0.5
    assert est == pytest.approx(cost_model.estimate_time(arch, work, prof.vector_share, *prof.dma_growth(team)))
    assert est < cost_model.estimate_time(arch, work, prof.vector_share)


def test_the_plan_listing_says_how_much_more_a_cut_plan_moves(xpu2):
    from compiler import render_only, use_target  # noqa: PLC0415
    import torch  # noqa: PLC0415
    q = torch.randn(1, 1, 64, 128)
    with use_target(xpu2), numerics("fast"), render_only() as seen:
        kernels.attention(q, q, q, causal=True, config=CUT)
    src = seen[0].source
    assert "//   strip-mined: " in src
    assert "//   DMA per program: " in src and "the kernel as written (re-reads of the cut passes)" in src


DECODE = dict(batch=8, heads=32, seq_q=1, seq_k=2048, head_dim=128)


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("op,shape", [
    ("matmul", dict(M=16, N=4096, K=4096)), ("matmul", dict(M=512, N=4096, K=4096)),
    ("matmul", dict(M=128, N=1024, K=4096)), ("attention", {**PREFILL, "causal": False}), ("attention", DECODE),
    *(("serving_attention", s) for s in kernels.OP_SPECS["serving_attention"].tune_shapes)],
    ids=["matmul-decode", "matmul-prefill", "matmul-mid", "attention-prefill", "attention-decode",
         "serving-decode", "serving-prefill"])
def test_the_scratchpad_defaults_are_the_cost_models_choice(xpu2, op, shape):
    """kernels/matmul.py, attention.py and serving_attention.py state their Kunlun defaults as the
    cost model's cheapest candidate of the scratchpad space; this holds them to it (within 5%) when
    the model or the memory plan changes. The params that change bits are chosen by the key dims
    alone (one choice serves decode and prefill), so the default is compared with the candidates
    that keep them."""
    spec = kernels.OP_SPECS[op]
    dims = spec.dims_of(shape)
    with numerics("fast"):
        default = kernels.config_for(op, xpu2, **dims)
        fixed = {k: v for k, v in default.items() if k not in spec.free_params(xpu2.caps)}
        priced = {tuple(sorted(c.items())): cost_model.estimate(xpu2, spec, c, shape, "fast")
                  for c in spec.spaces["scratchpad"] if all(c.get(k, v) == v for k, v in fixed.items())}
        mine = cost_model.estimate(xpu2, spec, default, shape, "fast")
    best = min(priced, key=priced.get)
    assert mine <= 1.05 * priced[best], (default, mine, dict(best), priced[best])


def test_a_config_is_priced_as_it_runs_on_the_shape(xpu2):
    """BLOCK_M is clamped to the rows a request has (4 in GQA decode); a larger BLOCK_M launches the
    same kernel there and must get the same price (its plan, not the unclamped one's)."""
    spec = kernels.OP_SPECS["serving_attention"]
    decode = next(s for s in spec.tune_shapes if s["label"] == "decode")
    with numerics("fast"):
        wide, launched = (cost_model.estimate(xpu2, spec, {"BLOCK_M": bm, "BLOCK_N": 16, "BLOCK_DK": 32, "BLOCK_DO": 32},
                                              decode, "fast") for bm in (16, 4))
    assert wide == pytest.approx(launched)


def test_the_estimate_prices_the_policy_it_is_given_not_the_ambient_one(xpu2):
    """The autotuner passes the policy its kernels are built with: under strict, rms_norm launches
    its fixed BLOCK and the software math, under fast the config as given; a numerics block around
    the call changes neither."""
    spec, cfg, shape = kernels.OP_SPECS["rms_norm"], {"BLOCK": 32}, {"rows": 64, "N": 1024}
    priced = {}
    for policy, ambient in (("fast", "strict"), ("strict", "fast")):
        with numerics(policy):
            own = cost_model.estimate(xpu2, spec, cfg, shape, policy)
        with numerics(ambient):
            priced[policy] = xpu2.estimate(spec, cfg, shape, policy)
        assert priced[policy] == own, (policy, priced[policy], own)
    assert priced["fast"] != priced["strict"], priced
