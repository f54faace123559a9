"""A minimal serving engine on tilejit's inference ops: the weights of a Llama-architecture
transformers model (random, from a small config; no download) run by a forward written with
`kernels.*` only, with a paged KV cache, against transformers' own `generate`.

    python -m examples.engine              # greedy: tokens equal to transformers', tokens/s of both
    python -m examples.engine --sample     # temperature/top-k/top-p: a request's tokens are the same in any batch
    python examples/engine.py --help       # also runs as a file

Per step: `embedding`; per layer `rms_norm` (then `add_rms_norm`), one fused q/k/v `matmul`, `rope`
(NeoX, positions per token), `kv_cache_write` of the new K/V into the paged cache (pages handed out
per request), `paged_attention` (prefill: the prompts back to back, no padding, causal per request
through cu_seqlens_q; decode: one token per request, split-KV), the o-projection, one fused gate/up
`matmul` and `silu_and_mul`, the down-projection; then the final norm, the lm_head on each
request's last token and `sampling.greedy` or `sampling.sample` (seed = the request's seed,
offset = its step). Needs the optional extra `hf` (pip install 'tilejit[hf]').

Greedy mode checks that the engine's tokens equal transformers' greedy `generate` of each prompt
alone and prints the largest difference of the first step's logits. Sampling mode checks that
every request draws the same tokens alone and inside the batch (the ops are batch-invariant and
the draw depends only on the request's seed and step).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

if __package__ in (None, ""):   # run as a file: the repository root first, as with `python -m`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kernels  # noqa: E402
from compiler import current_target  # noqa: E402
from compiler.cache import STATS  # noqa: E402
from compiler.clihelp import line_buffered, step  # noqa: E402
from examples.llama import add_model_args, build_model  # noqa: E402
from kernels import activation, embedding, kv_cache, rope, sampling  # noqa: E402
from kernels import serving_attention as sa  # noqa: E402


class Engine:
    """The model's weights in the layout the ops want, a paged KV cache and the forward."""

    def __init__(self, model, page_size: int = 16, max_tokens: int = 4096):
        cfg = model.config
        self.hq, self.hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = cfg.hidden_size // self.hq
        self.eps = cfg.rms_norm_eps
        self.page = page_size
        sd = {k: v.detach().float() for k, v in model.state_dict().items()}
        self.embed = sd["model.embed_tokens.weight"]
        self.final_norm = sd["model.norm.weight"]
        self.lm_head = sd["lm_head.weight"].t().contiguous()
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            w = lambda name: sd[p + name]   # noqa: E731
            self.layers.append(dict(
                in_norm=w("input_layernorm.weight"), post_norm=w("post_attention_layernorm.weight"),
                qkv=torch.cat([w("self_attn.q_proj.weight"), w("self_attn.k_proj.weight"),
                               w("self_attn.v_proj.weight")]).t().contiguous(),
                o=w("self_attn.o_proj.weight").t().contiguous(),
                gate_up=torch.cat([w("mlp.gate_proj.weight"), w("mlp.up_proj.weight")]).t().contiguous(),
                down=w("mlp.down_proj.weight").t().contiguous()))
        theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta",
                                                                                                     10000.0)
        self.cos, self.sin = rope.rope_cos_sin(cfg.max_position_embeddings, self.d, base=float(theta))
        pages = max_tokens // page_size
        self.k_cache = [torch.zeros(pages, page_size, self.hkv, self.d) for _ in self.layers]
        self.v_cache = [torch.zeros(pages, page_size, self.hkv, self.d) for _ in self.layers]
        self.free = list(range(pages))

    # -- the paged cache ------------------------------------------------------------------------
    def new_requests(self, n: int, max_len: int) -> torch.Tensor:
        """Block tables [n, pages] for n requests of up to max_len tokens each."""
        per = -(-max_len // self.page)
        if per * n > len(self.free):
            raise RuntimeError(f"the KV cache has {len(self.free)} free pages; {n} requests need {per * n}")
        bt = torch.tensor([self.free.pop() for _ in range(per * n)], dtype=torch.int32).reshape(n, per)
        return bt

    def release(self, bt: torch.Tensor) -> None:
        self.free.extend(bt.flatten().tolist())

    def slots(self, bt, req, pos):
        """Cache slots of tokens (request req[t] at position pos[t])."""
        return bt[req, pos // self.page].long() * self.page + pos % self.page

    # -- the forward ----------------------------------------------------------------------------
    def forward(self, ids, req, pos, bt, seq_lens, cu_q, last):
        """Logits of rows `last` for the new tokens ids (request req[t], position pos[t])."""
        T = ids.shape[0]
        x = embedding.embedding(ids, self.embed)
        slots = self.slots(bt, req, pos)
        residual = None
        for i, L in enumerate(self.layers):
            if residual is None:
                residual, h = x, kernels.rms_norm(x, L["in_norm"], self.eps)
            else:
                h, residual = kernels.add_rms_norm(x, residual, L["in_norm"], self.eps)
            qkv = kernels.matmul(h, L["qkv"])
            q = qkv[:, : self.hq * self.d].reshape(T, self.hq, self.d)
            k = qkv[:, self.hq * self.d: (self.hq + self.hkv) * self.d].reshape(T, self.hkv, self.d)
            v = qkv[:, (self.hq + self.hkv) * self.d:].reshape(T, self.hkv, self.d)
            q, k = rope.rope(q, k, self.cos, self.sin, pos)
            kv_cache.kv_cache_write(k, v, self.k_cache[i], self.v_cache[i], slots)
            o = sa.paged_attention(q, self.k_cache[i], self.v_cache[i], bt, seq_lens, cu_q)
            x = kernels.matmul(o.reshape(T, self.hq * self.d), L["o"])
            h, residual = kernels.add_rms_norm(x, residual, L["post_norm"], self.eps)
            x = kernels.matmul(activation.silu_and_mul(kernels.matmul(h, L["gate_up"])), L["down"])
        h, _ = kernels.add_rms_norm(x[last], residual[last], self.final_norm, self.eps)
        return kernels.matmul(h, self.lm_head)

    def generate(self, prompts: list[torch.Tensor], new_tokens: int, pick):
        """Tokens [n, new_tokens] of each prompt, and the first step's logits; pick(logits, step) -> ids."""
        n = len(prompts)
        lens = torch.tensor([p.numel() for p in prompts])
        bt = self.new_requests(n, int(lens.max()) + new_tokens)
        try:
            req = torch.repeat_interleave(torch.arange(n), lens)
            pos = torch.cat([torch.arange(int(x)) for x in lens])
            cu = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
            logits = self.forward(torch.cat(prompts), req, pos, bt, lens, cu, cu[1:] - 1)   # prefill
            first, out = logits, []
            for step in range(new_tokens):
                nxt = pick(logits, step)
                out.append(nxt)
                if step + 1 == new_tokens:
                    break
                pos = lens.clone()
                lens = lens + 1
                logits = self.forward(nxt, torch.arange(n), pos, bt, lens, None, torch.arange(n))   # decode
            return torch.stack(out, 1), first
        finally:
            self.release(bt)


def make_prompts(a):
    g = torch.Generator().manual_seed(a.seed + 1)
    return [torch.randint(3, a.vocab, (a.prompt - 3 * i,), generator=g) for i in range(a.batch)]


def hf_generate(model, prompts, new_tokens):
    """transformers' greedy generate of each prompt alone (no padding), and the first step's logits."""
    toks, logits = [], []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(p[None], attention_mask=torch.ones(1, p.numel(), dtype=torch.long),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
            toks.append(out.sequences[0, p.numel():])
            logits.append(out.logits[0][0])
    return torch.stack(toks), torch.stack(logits)


def hf_generate_batched(model, prompts, new_tokens):
    """transformers' greedy generate of the prompts as one left-padded batch (for the timing)."""
    n, longest = len(prompts), max(p.numel() for p in prompts)
    ids = torch.zeros(n, longest, dtype=torch.long)
    am = torch.zeros(n, longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, longest - p.numel():], am[i, longest - p.numel():] = p, 1
    with torch.no_grad():
        return model.generate(ids, attention_mask=am, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              do_sample=False)


def _first_generate(engine, prompts, new, pick):
    """The first generate compiles (or loads from the kernel cache) every kernel the engine runs."""
    b0 = STATS.builds
    with step("first generate: compiles the engine's kernels, or loads them from the kernel cache"):
        out = engine.generate(prompts, new, pick)
    print(f"  kernels built {STATS.builds - b0}, loaded {STATS.disk_hits} (the rest were already in this process)",
          flush=True)
    return out


def run_greedy(a, model, engine, prompts) -> int:
    greedy = lambda logits, step: sampling.greedy(logits)   # noqa: E731
    tokens, first = _first_generate(engine, prompts, a.new, greedy)
    with step("transformers' greedy generate of each prompt alone"):
        ref_tokens, ref_first = hf_generate(model, prompts, a.new)
    same = torch.equal(tokens, ref_tokens)
    diff = (first - ref_first).abs().max().item()
    print(f"first-step logits: max |engine - transformers| = {diff:.3e}")
    print(f"greedy tokens equal to transformers' generate: {same}")
    with step("timing both (best of 3 generates each)"):
        t_engine = _best(lambda: engine.generate(prompts, a.new, greedy))
        hf_generate_batched(model, prompts, a.new)
        t_hf = _best(lambda: hf_generate_batched(model, prompts, a.new))
    n = len(prompts) * a.new
    print(f"tokens/s: transformers generate (left-padded batch) {n / t_hf:.1f}, engine (paged, no padding) "
          f"{n / t_engine:.1f} (ratio engine/transformers {t_hf / t_engine:.2f}; {torch.get_num_threads()} threads)")
    return 0 if same and diff < 1e-3 else 1


def run_sample(a, engine, prompts) -> int:
    seeds = torch.arange(len(prompts)) * 1000 + a.seed

    def pick_for(idx):
        return lambda logits, step: sampling.sample(logits, 0.8, 40, 0.9, seed=seeds[idx], offset=step)
    batch, _ = _first_generate(engine, prompts, a.new, pick_for(torch.arange(len(prompts))))
    with step("each request alone"):
        alone = [engine.generate([p], a.new, pick_for(torch.tensor([i])))[0][0] for i, p in enumerate(prompts)]
    same = all(torch.equal(batch[i], t) for i, t in enumerate(alone))
    print(f"sampled tokens (T 0.8, top-k 40, top-p 0.9), request 0: {batch[0].tolist()}")
    print(f"every request draws the same tokens alone and in the batch of {len(prompts)}: {same}")
    return 0 if same else 1


def _best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=20, help="the longest prompt (request i has 3 i tokens fewer)")
    ap.add_argument("--new", type=int, default=8, help="tokens to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", action="store_true", help="sample (temperature, top-k, top-p) instead of greedy")
    a = ap.parse_args(argv)
    a.arch = "llama"
    if a.prompt - 3 * (a.batch - 1) < 1:
        ap.error(f"--prompt {a.prompt} is too short for --batch {a.batch} (request i has 3 i tokens fewer)")
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("this example needs the optional extra 'hf': pip install 'tilejit[hf]'", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    line_buffered()
    print(f"engine on target '{current_target().name}' (TILEJIT_TARGET), {torch.get_num_threads()} threads",
          flush=True)
    with step("building the model (random weights from a config)"):
        model = build_model(a)
        engine = Engine(model)
    prompts = make_prompts(a)
    print(f"llama: {a.layers} layers, hidden {a.hidden}, heads {a.heads}/{a.kv_heads} kv, vocab {a.vocab}; "
          f"{a.batch} requests of {[p.numel() for p in prompts]} prompt tokens, {a.new} new tokens; paged KV "
          f"cache, page {engine.page}")
    return run_sample(a, engine, prompts) if a.sample else run_greedy(a, model, engine, prompts)


if __name__ == "__main__":
    sys.exit(main())
