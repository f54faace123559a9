"""A Llama-style model step on tilejit against eager transformers: prefill and decode timed apart,
fp32 and bf16, in one process.

    python -m benchmarks.model_step [--dtypes fp32,bf16] [--prompt 128] [--batch 1] [--repeat 5]
                                    [--hidden 1024 --heads 16 --kv-heads 4 ...]

The model is examples/llama.py's (transformers' LlamaForCausalLM from a config, random seeded
weights, no download); tilejit's copy has its norms, attention, MLP activations and linear layers
swapped for `kernels.*` (kernels.integrations.transformers.apply). Both run under torch.no_grad.

With --compile, a third copy runs under torch.compile (Inductor, default mode): its samples join
the same rotation and "vs compile" is t_compiled / t_tilejit. Its first calls compile (tens of
seconds per step and dtype on 2 cores), before any sample is taken.

- prefill: one forward over `batch x prompt` tokens that fills a fresh KV cache;
- decode: one forward of one new token per sequence against the prompt's KV cache; the cache is
  cropped back to the prompt after every step, so each sample times the same step.

Samples alternate between the two models (a burst of load from another process does not land on
one side only); each sample times enough back-to-back calls to last >= ~50 ms, and the median
sample is reported. "speed-up" is the median of the per-sample t_eager / t_tilejit (> 1: tilejit
is faster; a sample of each side taken back to back shares the load of its moment), "spread" the
(q3 - q1) / median of those ratios. "logits" is the largest |tilejit - eager| of the prefill
logits over the largest |eager logit|.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import copy  # noqa: E402
import inspect  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from benchmarks.speed import paired_ratio  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MIN_SAMPLE_S = 0.05


def _calls_per_sample(fn) -> int:
    """Back-to-back calls of fn (warmed up) that last >= MIN_SAMPLE_S."""
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(MIN_SAMPLE_S / max(time.perf_counter() - t0, 1e-6)))


def _sample(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _steps(model, ids):
    """(prefill, decode) callables for one model: prefill builds a fresh cache; decode runs one token
    against a prefilled cache and crops it back, so every call is the same step."""
    prompt = ids.shape[1]
    # transformers 5 names the forward's cache argument `cache`; earlier versions `past_key_values`
    arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
    nxt = ids[:, -1:]
    pos = torch.full((ids.shape[0], 1), prompt, dtype=torch.long)

    def prefill():
        with torch.no_grad():
            return model(ids, use_cache=True)

    def decode():
        with torch.no_grad():
            model(nxt, position_ids=pos, use_cache=True, **{arg: cache})
        cache.crop(-1)   # drops the token just appended (a negative count: every transformers version reads it so)

    return prefill, decode


def _interleaved(groups, repeat: int) -> list[tuple]:
    """Per group (tilejit, eager[, compiled]): the median seconds per call of tilejit and eager, the
    median and spread of the per-sample speed-ups over eager (speed.paired_ratio), and the median
    speed-up over the compiled model (None without one); every side sampled in turn."""
    calls = [[_calls_per_sample(fn) for fn in g] for g in groups]
    samples = [[[] for _ in g] for g in groups]
    for _ in range(repeat):
        for g, cs, ss in zip(groups, calls, samples):
            for fn, c, s in zip(g, cs, ss):
                s.append(_sample(fn, c))
    return [(statistics.median(ss[0]), statistics.median(ss[1]), *paired_ratio(ss[1], ss[0]),
             paired_ratio(ss[2], ss[0])[0] if len(ss) > 2 else None) for ss in samples]


def run(a) -> list[tuple]:
    from examples.llama import build_model, tilejit_model  # noqa: PLC0415
    rows = []
    for dname in a.dtypes.split(","):
        ref = build_model(a).to(DTYPES[dname])
        tiled = tilejit_model(copy.deepcopy(ref), True)
        g = torch.Generator().manual_seed(a.seed + 1)
        ids = torch.randint(3, a.vocab, (a.batch, a.prompt), generator=g)
        with torch.no_grad():
            want, got = ref(ids).logits.float(), tiled(ids).logits.float()
        err = ((got - want).abs().max() / want.abs().max()).item()
        sides = [_steps(tiled, ids), _steps(ref, ids)]
        if a.compile:
            sides.append(_steps(torch.compile(copy.deepcopy(ref)), ids))
        times = _interleaved(list(zip(*sides)), a.repeat)
        for step, (t_tj, t_ref, ratio, spread, vs_compiled) in zip(("prefill", "decode"), times):
            tokens = a.batch * (a.prompt if step == "prefill" else 1)
            rows.append((step, dname, t_tj, t_ref, tokens, err, ratio, spread, vs_compiled))
            print(f"  done {step} {dname}: tilejit {t_tj * 1e3:.2f} ms, eager {t_ref * 1e3:.2f} ms", flush=True)
    return rows


def parser() -> argparse.ArgumentParser:
    from examples.llama import add_model_args  # noqa: PLC0415
    ap = argparse.ArgumentParser(description=description(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.set_defaults(layers=2, hidden=1024, intermediate=2816, heads=16, kv_heads=4, vocab=1024)
    ap.add_argument("--arch", choices=("llama", "qwen2", "mistral"), default="llama")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence (the decode step's context)")
    ap.add_argument("--repeat", type=int, default=5, help="samples per measurement (median reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="also time the model under torch.compile (Inductor)")
    return ap


def main(argv=None) -> None:
    ap = parser()
    a = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    for d in a.dtypes.split(","):
        if d not in DTYPES:
            ap.error(f"--dtypes: unknown dtype {d!r}; choose from {', '.join(DTYPES)}")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rows = run(a)
    print()
    print(f"{a.arch}: {a.layers} layers, hidden {a.hidden}, intermediate {a.intermediate}, heads {a.heads}/"
          f"{a.kv_heads} kv, vocab {a.vocab}; batch {a.batch}, prompt {a.prompt}; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, median of {a.repeat} samples")
    hdr = ("step", "dtype", "tilejit ms", "eager ms", "speed-up", "spread", "vs compile", "tj tokens/s", "logits")
    cells = [(s, d, f"{t * 1e3:.2f}", f"{r * 1e3:.2f}", f"{x:.2f}x", f"{sp:.0%}", "-" if c is None else f"{c:.2f}x",
              f"{n / t:.0f}", f"{e:.1e}") for s, d, t, r, n, e, x, sp, c in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    for line in (hdr, tuple("-" * w for w in widths), *cells):
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
    print(f"\nspeed-up = the median over samples of t_eager / t_tilejit (> 1: tilejit is faster); spread = "
          f"(q3 - q1) / median of those per-sample speed-ups; vs compile = the same median of "
          f"t_compiled / t_tilejit (--compile). elapsed {time.perf_counter() - t0:.1f} s; "
          f"1-min load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end (this process adds ~1)")


if __name__ == "__main__":
    main()
