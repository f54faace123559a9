"""A Llama-architecture model from transformers on tilejit: eager transformers against the same
model with tilejit's ops swapped in (kernels.integrations.transformers.apply), random weights from
a small config (no download).

    python -m examples.llama                       # default target: logits error, greedy tokens, tokens/s
    python -m examples.llama --strict --targets cpu,kunlun:xpu3,gpu:interpret   # bitwise across targets
    python -m examples.llama --tp 2                # tensor-parallel on two cpu ranks (runtime.collectives)
    python examples/llama.py --help                # also runs as a file

Needs the optional extra `hf` (pip install 'tilejit[hf]'). A left-padded batch of prompts runs
through both models: the prefill logits of the real (unpadded) positions are compared, then both
generate greedily and their tokens are compared; tokens/s is measured for both in the same run
(after one warm-up generate each, which also compiles tilejit's kernels).

--tp N splits every layer Megatron-style over N ranks: q/k/v and gate/up projections by output
columns (whole heads, kv heads too), o_proj and down_proj by input rows followed by one
all_reduce each (the bias added once, after it); norms, embeddings and lm_head are replicated.
The all_reduce splits two reductions, so logits match the single-rank run within fp32 tolerance
(not bit for bit), and the greedy tokens are compared.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings

if __package__ in (None, ""):   # run as a file: the repository root first, as with `python -m`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from compiler.clihelp import line_buffered, step  # noqa: E402


def build_config(a):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}[a.arch]
    extra = {"sliding_window": None} if a.arch == "mistral" else {}
    return cls(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
               num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
               max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)


def add_model_args(ap) -> None:
    """The model-size options (a small config: random weights, no download)."""
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)


def build_model(a):
    """The eager model, seeded: the same weights in every process."""
    import transformers
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "mistral": transformers.MistralForCausalLM}[a.arch]
    torch.manual_seed(a.seed)
    return cls(build_config(a)).eval()


def prompts(a):
    """A left-padded batch: row i is shorter than the longest by i * (prompt // (2 * batch)) tokens."""
    g = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(3, a.vocab, (a.batch, a.prompt), generator=g)
    am = torch.ones(a.batch, a.prompt, dtype=torch.long)
    for i in range(a.batch):
        pad = i * (a.prompt // (2 * a.batch))
        am[i, :pad] = 0
        ids[i, :pad] = 0
    return ids, am


def tilejit_model(model, linear: bool):
    from kernels.integrations import transformers as tilejit_hf
    return tilejit_hf.apply(model, linear=linear)


def generate(model, ids, am, new_tokens):
    with torch.no_grad():
        return model.generate(ids, attention_mask=am, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              do_sample=False)


def prefill_logits(model, ids, am):
    with torch.no_grad():
        return model(ids, attention_mask=am).logits


def tokens_per_second(model, ids, am, new_tokens, repeat=3):
    generate(model, ids, am, new_tokens)            # warm-up (tilejit: compiles or loads its kernels)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = generate(model, ids, am, new_tokens)
        best = min(best, time.perf_counter() - t0)
    return ids.shape[0] * new_tokens / best, out


# ---------------------------------------------------------------------------------------------
# modes
# ---------------------------------------------------------------------------------------------
def run_default(a):
    from compiler import current_target
    ids, am = prompts(a)
    ref = build_model(a)
    tiled = tilejit_model(copy.deepcopy(ref), a.linear)
    print(f"{a.arch}: {a.layers} layers, hidden {a.hidden}, heads {a.heads}/{a.kv_heads} kv, vocab {a.vocab}; "
          f"batch {a.batch} x {a.prompt} (left-padded), {a.new} new tokens; target '{current_target().name}'")
    print(f"swapped: {tiled.tilejit_applied}")
    keep = am.bool()
    with step("prefill of both (the first compiles, or loads, tilejit's kernels)"):
        diff = (prefill_logits(tiled, ids, am) - prefill_logits(ref, ids, am))[keep].abs().max().item()
    print(f"prefill logits: max |tilejit - eager transformers| = {diff:.3e} (real positions)")
    with step("generate and time both"):
        tps_ref, out_ref = tokens_per_second(ref, ids, am, a.new)
        tps_tj, out_tj = tokens_per_second(tiled, ids, am, a.new)
    same = torch.equal(out_ref, out_tj)
    print(f"greedy tokens equal: {same}")
    print(f"tokens/s: eager transformers {tps_ref:.1f}, tilejit {tps_tj:.1f} (ratio tilejit/eager "
          f"{tps_tj / tps_ref:.2f}; {torch.get_num_threads()} threads)")
    return 0 if same and diff < 1e-4 else 1


def run_strict(a):
    from compiler import numerics, use_target
    ids, am = prompts(a)
    tiled = tilejit_model(build_model(a), a.linear)
    targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    results = {}
    with numerics("strict"):
        for t in targets:
            with use_target(t):
                print(f"target '{t}': prefill and generate, strict policy ...", flush=True)
                t0 = time.perf_counter()
                results[t] = (prefill_logits(tiled, ids, am), generate(tiled, ids, am, a.new))
                print(f"{t}: logits {tuple(results[t][0].shape)} in {time.perf_counter() - t0:.1f} s", flush=True)
    first = targets[0]
    ok = True
    for t in targets[1:]:
        eq = torch.equal(results[t][0], results[first][0])
        same_tokens = torch.equal(results[t][1], results[first][1])
        d = (results[t][0] - results[first][0]).abs().max().item()
        print(f"strict {t} vs {first}: logits bitwise equal: {eq} (max diff {d:.1e}); tokens equal: {same_tokens}")
        ok = ok and eq and same_tokens
    return 0 if ok else 1


class RowParallel(nn.Module):
    """A row shard of a linear layer: the partial product, one all_reduce, then the bias (once)."""

    def __init__(self, linear: nn.Linear, bias, comm):
        super().__init__()
        self.linear, self.bias, self.comm = linear, bias, comm

    def forward(self, x):
        y = self.linear(x).contiguous()
        self.comm.all_reduce(y).wait()
        return y if self.bias is None else y + self.bias


def _sliced(lin: nn.Linear, rows=None, cols=None) -> nn.Linear:
    w = lin.weight.detach()
    w = w[rows] if rows is not None else w
    w = w[:, cols] if cols is not None else w
    new = nn.Linear(w.shape[1], w.shape[0], bias=lin.bias is not None and cols is None)
    with torch.no_grad():
        new.weight.copy_(w)
        if new.bias is not None:
            new.bias.copy_(lin.bias.detach()[rows] if rows is not None else lin.bias.detach())
    return new


def shard(model, rank: int, world: int, comm):
    """This rank's part of every decoder layer (see the module docstring)."""
    cfg = model.config
    hd = cfg.hidden_size // cfg.num_attention_heads
    for name, n in (("num_attention_heads", cfg.num_attention_heads), ("num_key_value_heads", cfg.num_key_value_heads),
                    ("intermediate_size", cfg.intermediate_size)):
        if n % world:
            raise SystemExit(f"--tp {world}: {name} = {n} is not divisible by {world}")

    def part(n):
        return slice(rank * n // world, (rank + 1) * n // world)
    q_rows, kv_rows = part(cfg.num_attention_heads * hd), part(cfg.num_key_value_heads * hd)
    ff = part(cfg.intermediate_size)
    for layer in model.model.layers:
        at, mlp = layer.self_attn, layer.mlp
        at.q_proj, at.k_proj, at.v_proj = _sliced(at.q_proj, q_rows), _sliced(at.k_proj, kv_rows), \
            _sliced(at.v_proj, kv_rows)
        at.o_proj = RowParallel(_sliced(at.o_proj, cols=q_rows), at.o_proj.bias, comm)
        mlp.gate_proj, mlp.up_proj = _sliced(mlp.gate_proj, ff), _sliced(mlp.up_proj, ff)
        mlp.down_proj = RowParallel(_sliced(mlp.down_proj, cols=ff), mlp.down_proj.bias, comm)
    return model


def tp_rank(comm, a):
    """One rank of --tp: the same seeded model everywhere, this rank's shard, on tilejit."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model = tilejit_model(shard(build_model(a), comm.rank, comm.size, comm), a.linear)
    ids, am = prompts(a)
    return prefill_logits(model, ids, am), generate(model, ids, am, a.new)


def run_tp(a):
    from runtime.collectives import run_ranks
    ids, am = prompts(a)
    single = tilejit_model(build_model(a), a.linear)
    from compiler import current_target
    with step(f"single-rank reference on target '{current_target().name}' (compiles, or loads, the kernels)"):
        ref_logits, ref_tokens = prefill_logits(single, ids, am), generate(single, ids, am, a.new)
    print(f"{a.tp} cpu ranks (gloo) ...", flush=True)
    t0 = time.perf_counter()
    results = run_ranks(tp_rank, a.tp, a, timeout=120, deadline=600)
    print(f"{a.tp} cpu ranks (gloo), {time.perf_counter() - t0:.1f} s")
    lost = [r for r, x in enumerate(results) if x is None]
    if lost:
        print(f"ranks {lost} exited without a result (killed from outside?)", file=sys.stderr)
        return 1
    keep = am.bool()
    ok = True
    for r, (logits, tokens) in enumerate(results):
        d = (logits - ref_logits)[keep].abs().max().item()
        same = torch.equal(tokens, ref_tokens)
        print(f"rank {r}: max |logits_tp - logits_single| = {d:.3e}; greedy tokens equal to single-rank: {same}")
        ok = ok and same and d < 1e-4
    print(f"ranks hold the same logits: {all(torch.equal(results[0][0], x[0]) for x in results)}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=("llama", "qwen2", "mistral"), default="llama")
    add_model_args(ap)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=12, help="prompt length (rows after the first are left-padded)")
    ap.add_argument("--new", type=int, default=8, help="tokens to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-linear", dest="linear", action="store_false",
                    help="keep transformers' nn.Linear (default: every linear layer runs on kernels.matmul)")
    ap.add_argument("--strict", action="store_true", help="strict numerics; compare --targets bit for bit")
    ap.add_argument("--targets", default="cpu,kunlun:xpu3,gpu:interpret")
    ap.add_argument("--tp", type=int, default=0, help="run tensor-parallel on this many cpu ranks")
    a = ap.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("this example needs the optional extra 'hf': pip install 'tilejit[hf]'", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    line_buffered()
    if a.tp:
        return run_tp(a)
    if a.strict:
        return run_strict(a)
    return run_default(a)


if __name__ == "__main__":
    sys.exit(main())
