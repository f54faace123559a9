"""Speed of the inference ops against torch eager (and torch.nn.functional where it has the op),
and of split-KV paged decode against kernels.attention's decode (one program per request and
head), on the cpu target.

    python -m benchmarks.inference_ops [--quick] [--repeat R] [--dtype fp32|bf16] [--only TEXT]

Each case is timed with benchmarks.speed.checked_samples (samples taken round-robin in this one
process; the median per call, the fastest sample's ratio beside it, each side checked against a run
on one thread: "?" marks a ratio whose parallel runs kept waiting for busy cores). Ratio =
t_baseline / t_tilejit (> 1: tilejit is faster). Baselines:

- rope:            torch ops (index the tables, rotate-half, cat), out of place;
- silu_and_mul:    F.silu(x[..., :d]) * x[..., d:];   gelu_and_mul: F.gelu(tanh) likewise;
- kv_cache_write:  index_copy_ of k and v into the flattened caches;
- embedding:       F.embedding;
- add_layer_norm:  F.layer_norm(x + r);
- log_softmax:     torch.log_softmax;   greedy: torch.argmax;
- sample:          torch.topk, softmax, the top-p cut on the cumsum, torch.multinomial (the draws
                   differ, so only the token range is checked);
- w8_matmul:       a @ (w.float() * scale) (dequantise, then matmul);
- decode (paged):  F.scaled_dot_product_attention (enable_gqa) on dense [B, H, L, D] keys, and
                   kernels.attention (one program per request and head, no split) on the same keys;
- varlen prefill:  F.scaled_dot_product_attention (is_causal, enable_gqa) on the requests as a
                   dense batch (equal lengths, so the dense batch is the same problem).
Every case checks that tilejit's output matches the baseline's first.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402
from benchmarks.speed import best_ratio, checked_samples  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402
from kernels import activation, add_norm, embedding, kv_cache, quant_matmul, rope, sampling  # noqa: E402
from kernels import serving_attention as sa  # noqa: E402


def _g():
    return torch.Generator().manual_seed(0)


def _rope_case(T, Hq, Hk, D, dt):
    q, k = torch.randn(T, Hq, D, generator=_g()).to(dt), torch.randn(T, Hk, D, generator=_g()).to(dt)
    cos, sin = rope.rope_cos_sin(4096, D)
    pos = torch.randint(0, 4096, (T,), generator=_g())

    def eager(q, k):
        c, s = cos[pos][:, None, :], sin[pos][:, None, :]

        def one(x):
            x1, x2 = x[..., : D // 2].float(), x[..., D // 2:].float()
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)
        return one(q), one(k)
    return (f"rope {T} tok {Hq}+{Hk}x{D}", lambda q, k: rope.rope(q, k, cos, sin, pos), eager, (q, k))


def _act_case(rows, d, dt, act):
    x = torch.randn(rows, 2 * d, generator=_g()).to(dt)
    base = (lambda x: F.silu(x[:, :d]) * x[:, d:]) if act == "silu" else \
        (lambda x: F.gelu(x[:, :d], approximate="tanh") * x[:, d:])
    return (f"{act}_and_mul [{rows}, 2x{d}]", lambda x: activation.act_and_mul(x, "silu" if act == "silu" else
                                                                            "gelu_tanh"), base, (x,))


def _kv_case(T, H, D, dt):
    k, v = torch.randn(T, H, D, generator=_g()).to(dt), torch.randn(T, H, D, generator=_g()).to(dt)
    kc, vc = torch.zeros(T * 2 // 16 + 1, 16, H, D, dtype=dt), torch.zeros(T * 2 // 16 + 1, 16, H, D, dtype=dt)
    slots = torch.randperm(kc.shape[0] * 16, generator=_g())[:T]

    def tj(k, v):
        kv_cache.kv_cache_write(k, v, kc, vc, slots)
        return kc

    def eager(k, v):
        kc.view(-1, H, D).index_copy_(0, slots, k)
        vc.view(-1, H, D).index_copy_(0, slots, v)
        return kc
    return (f"kv_cache_write {T} tok {H}x{D}", tj, eager, (k, v))


def _decode_case(B, Hq, Hk, D, L, dt):
    q = torch.randn(B, Hq, D, generator=_g()).to(dt)
    pages = L // 16
    kc = torch.randn(B * pages, 16, Hk, D, generator=_g()).to(dt)
    vc = torch.randn(B * pages, 16, Hk, D, generator=_g()).to(dt)
    bt = torch.randperm(B * pages, generator=_g()).reshape(B, pages)
    lens = torch.full((B,), L)
    kd = kc[bt].reshape(B, L, Hk, D).transpose(1, 2).contiguous()
    vd = vc[bt].reshape(B, L, Hk, D).transpose(1, 2).contiguous()
    tj = lambda q: sa.paged_decode_attention(q, kc, vc, bt, lens)   # noqa: E731
    sdpa = lambda q: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)[:, :, 0]   # noqa: E731
    row = lambda q: kernels.attention(q[:, :, None], kd, vd)[:, :, 0]   # noqa: E731
    return [(f"paged decode {B} req {Hq}/{Hk}x{D} kv {L} vs SDPA", tj, sdpa, (q,)),
            (f"paged decode {B} req {Hq}/{Hk}x{D} kv {L} vs 1-program-per-row", tj, row, (q,))]


def _prefill_case(B, S, Hq, Hk, D, dt):
    q = torch.randn(B * S, Hq, D, generator=_g()).to(dt)
    k, v = (torch.randn(B * S, Hk, D, generator=_g()).to(dt) for _ in range(2))
    cu = torch.arange(B + 1) * S
    heads = lambda t: t.reshape(B, S, t.shape[1], D).transpose(1, 2)   # noqa: E731
    tj = lambda q: sa.varlen_attention(q, k, v, cu, cu)   # noqa: E731
    sdpa = lambda q: F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True,   # noqa: E731
                                                    enable_gqa=True).transpose(1, 2).reshape(q.shape)
    return [(f"varlen prefill {B}x{S} tok {Hq}/{Hk}x{D} causal vs SDPA", tj, sdpa, (q,))]


def _torch_sample(z, temperature=0.8, k=50, p=0.9):
    """What an engine does in torch: top-k values, softmax, the top-p cut on the sorted cumsum, multinomial."""
    vals, idx = torch.topk(z.float() / temperature, k, -1)
    probs = torch.softmax(vals, -1)
    cut = probs.cumsum(-1) - probs > p
    probs = probs.masked_fill(cut, 0.0)
    return idx.gather(-1, torch.multinomial(probs, 1)).squeeze(-1)


def build(quick: bool, dt):
    T, N, V, L = (64, 1024, 8000, 1024) if quick else (256, 4096, 32000, 4096)
    x, r = torch.randn(T, N, generator=_g()).to(dt), torch.randn(T, N, generator=_g()).to(dt)
    w, b = torch.randn(N, generator=_g()).to(dt), torch.randn(N, generator=_g()).to(dt)
    table = torch.randn(V, N, generator=_g()).to(dt)
    ids = torch.randint(0, V, (T,), generator=_g())
    logits = torch.randn(16, V, generator=_g()).to(dt)
    cases = [_rope_case(T, 32, 8, 128, dt), _act_case(T, 4 * N // 3 // 32 * 32, dt, "silu"),
             _act_case(T, 4 * N // 3 // 32 * 32, dt, "gelu"), _kv_case(T, 8, 128, dt),
             ("embedding", lambda i: embedding.embedding(i, table), lambda i: F.embedding(i, table), (ids,)),
             ("add_layer_norm", lambda x, r: add_norm.add_layer_norm(x, r, w, b)[0],
              lambda x, r: F.layer_norm(x + r, (N,), w, b), (x, r)),
             ("log_softmax [16, V]", sampling.log_softmax, lambda z: torch.log_softmax(z.float(), -1).to(z.dtype),
              (logits,)),
             ("greedy [16, V]", sampling.greedy, lambda z: torch.argmax(z, -1), (logits,)),
             ("sample T 0.8 top-k 50 top-p 0.9 [16, V]", lambda z: sampling.sample(z, 0.8, 50, 0.9, seed=1, offset=7),
              _torch_sample, (logits,))]
    wq, sc = quant_matmul.quantize_int8(torch.randn(N, N, generator=_g()) * N ** -0.5, 128)
    cases.append((f"w8_matmul 16x{N}x{N} g128", lambda a: quant_matmul.w8_matmul(a, wq, sc, group_size=128),
                  lambda a: a @ (wq.to(a.dtype) * sc.repeat_interleave(128, 0).to(a.dtype)), (x[:16],)))
    return (cases + _decode_case(4 if quick else 8, 32, 8, 128, L, dt)
            + _prefill_case(2 if quick else 4, 256 if quick else 1024, 32, 8, 128, dt))


def _check(name, a, b, dt):
    a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
    if name.startswith("sample"):   # two random draws: both must be token ids
        assert a.shape == b.shape and bool((a >= 0).all()), name
    elif a.dtype.is_floating_point:
        tol = 2e-3 if dt == torch.float32 else 3e-2
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
    else:
        assert torch.equal(a, b), name


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    print(f"tilejit (cpu) inference ops vs torch {torch.__version__}, {args.dtype}, "
          f"{'quick' if args.quick else 'full'} shapes, median of {args.repeat}; ratio = t_base / t_tilejit")
    print(f"{'case':<58} {'tilejit':>10} {'baseline':>10} {'ratio':>7} {'(best)':>7}")
    doubts = []
    for name, tj, base, inp in build(args.quick, dt):
        if args.only not in name:
            continue
        _check(name, tj(*inp), base(*inp), dt)
        (s_tj, s_base), doubt = checked_samples([tj, base], inp, args.repeat)
        t_tj, t_base = statistics.median(s_tj), statistics.median(s_base)
        mark = "?" if doubt else ""
        doubts += [f"{name}: {doubt}"] if doubt else []
        print(f"{name:<58} {t_tj * 1e6:>8.1f}us {t_base * 1e6:>8.1f}us {t_base / t_tj:>6.2f}{mark or ' '} "
              f"{best_ratio(s_base, s_tj):>6.2f}{mark}", flush=True)
    print("ratio: of the median samples; (best): of the fastest samples (other work only adds time).")
    for d in doubts:
        print(f"? {d}: not to be believed")


if __name__ == "__main__":
    main()
