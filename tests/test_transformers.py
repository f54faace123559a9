"""kernels.integrations.transformers on tiny random-weight Llama / Qwen2 / Mistral models (no hub
download): padded batches equal eager transformers within fp32 tolerance (padded query rows give
0, never NaN), greedy generate() gives the same tokens, the applied model compiles with
fullgraph=True and exports, and gradients flow. Needs the optional extra `hf` (transformers)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the optional extra 'hf' (transformers) is not installed: "
                                                          "pip install 'tilejit[hf]'")
from kernels.integrations import transformers as tj_hf  # noqa: E402

pytestmark = pytest.mark.integration

warnings.filterwarnings("ignore", module="transformers")

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
ARCHS = {"llama": ("LlamaConfig", "LlamaForCausalLM", {}),
         "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
         "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None})}


def make(arch: str, seed: int = 0, **overrides):
    cfg_name, model_name, extra = ARCHS[arch]
    cfg = getattr(transformers, cfg_name)(**{**TINY, **extra, **overrides})
    torch.manual_seed(seed)
    return getattr(transformers, model_name)(cfg).eval()


def padded_batch(batch=3, seq=9, left=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, TINY["vocab_size"], (batch, seq), generator=g)
    am = torch.ones(batch, seq, dtype=torch.long)
    for i in range(1, batch):     # row 0 unpadded, the others padded by 2, 4, ...
        pad = 2 * i
        (am[i, :pad] if left else am[i, seq - pad:]).zero_()
        (ids[i, :pad] if left else ids[i, seq - pad:]).fill_(TINY["pad_token_id"])
    return ids, am


@pytest.fixture(scope="module", params=list(ARCHS))
def models(request):
    ref = make(request.param)
    tiled = tj_hf.apply(copy.deepcopy(ref), linear=request.param == "llama")
    return request.param, ref, tiled


def test_apply_swaps_every_module_of_the_model_and_only_that_model(models):
    arch, ref, tiled = models
    done = tiled.tilejit_applied
    layers = TINY["num_hidden_layers"]
    assert done.attention and done.rms_norm == 2 * layers + 1 and done.rope == layers and done.mlp == layers
    assert done.linear == (7 * layers + 1 if arch == "llama" else 0)
    assert tiled.config._attn_implementation == "tilejit" and ref.config._attn_implementation != "tilejit"
    assert not any(isinstance(m, (tj_hf.TilejitRMSNorm, tj_hf.TilejitMLP)) for m in ref.modules())
    assert "forward" not in vars(ref.model.layers[0].self_attn)       # the eager model keeps its class forward
    assert set(tiled.state_dict()) == set(ref.state_dict())            # the same parameters, the same keys


def test_linear_weights_are_stored_transposed_with_the_same_bits_and_checkpoint():
    """apply(linear=True) stores each unshared nn.Linear weight column-major (its transpose, which
    the matmul reads, row-major), keeps a tied lm_head's layout, gives the same logits bit for bit
    as the weights left as they were, and state_dict() still holds them contiguous and unchanged."""
    ref = make("llama", tie_word_embeddings=True)
    tiled = tj_hf.apply(copy.deepcopy(ref), linear=True)
    q = tiled.model.layers[0].self_attn.q_proj
    assert isinstance(q, tj_hf.TilejitLinear) and q.weight.t().is_contiguous() and not q.weight.is_contiguous()
    assert tiled.lm_head.weight is tiled.model.embed_tokens.weight and tiled.lm_head.weight.is_contiguous()
    as_was = copy.deepcopy(tiled)
    for m in as_was.modules():
        if isinstance(m, tj_hf.TilejitLinear):
            m.weight.data = m.weight.data.contiguous()
    ids, am = padded_batch()
    with torch.no_grad():
        for step in (ids, ids[:, -1:]):   # prefill rows and one decode row take different tiles
            assert torch.equal(tiled(step).logits, as_was(step).logits)
    sd, want = tiled.state_dict(), ref.state_dict()
    assert all(v.is_contiguous() and torch.equal(v, want[k]) for k, v in sd.items())
    tiled.load_state_dict(want)
    assert q.weight.t().is_contiguous()   # loading copies into the Parameter: its layout stays


@pytest.mark.parametrize("left", [True, False], ids=["left-padded", "right-padded"])
def test_padded_batch_equals_eager_transformers(models, left):
    _, ref, tiled = models
    ids, am = padded_batch(left=left)
    with torch.no_grad():
        want, got = ref(ids, attention_mask=am).logits, tiled(ids, attention_mask=am).logits
    assert not torch.isnan(got).any()
    keep = am.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-5, atol=1e-5)


def test_greedy_generate_gives_the_same_tokens(models):
    _, ref, tiled = models
    ids, am = padded_batch()
    with torch.no_grad():
        want = ref.generate(ids, attention_mask=am, max_new_tokens=8, do_sample=False)
        got = tiled.generate(ids, attention_mask=am, max_new_tokens=8, do_sample=False)
    assert torch.equal(got, want)


def test_sliding_window_mask_is_honoured():
    ref = make("mistral", sliding_window=4)
    tiled = tj_hf.apply(copy.deepcopy(ref))
    ids, am = padded_batch(seq=11)
    with torch.no_grad():
        want, got = ref(ids, attention_mask=am).logits, tiled(ids, attention_mask=am).logits
        full = make("mistral")(ids, attention_mask=am).logits
    keep = am.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-5, atol=1e-5)
    assert (full[keep] - want[keep]).abs().max() > 1e-3      # the window does change the result


def test_compile_fullgraph_and_export_of_the_applied_model():
    tiled = tj_hf.apply(make("llama"), linear=True)
    ids, am = padded_batch(batch=2)
    torch._dynamo.reset()
    with torch.no_grad():
        eager = tiled(ids, attention_mask=am, use_cache=False).logits
        compiled = torch.compile(tiled, backend="eager", fullgraph=True)
        assert torch.equal(compiled(ids, attention_mask=am, use_cache=False).logits, eager)
        ep = torch.export.export(tiled, (ids,), {"attention_mask": am, "use_cache": False})
        assert torch.equal(ep.module()(ids, attention_mask=am, use_cache=False).logits, eager)
    used = {str(n.target).split(".")[1] for n in ep.graph.nodes if n.op == "call_function" and "tilejit" in str(n.target)}
    assert {"rms_norm", "matmul", "attention", "hf_rope", "hf_act_and_mul"} <= used


def test_gradients_flow_through_the_applied_model():
    ref = make("qwen2")
    tiled = tj_hf.apply(copy.deepcopy(ref), linear=True)
    ids, am = padded_batch(batch=2)
    for m in (ref, tiled):
        m(ids, attention_mask=am, labels=ids).loss.backward()
    for (name, p), q in zip(ref.named_parameters(), tiled.parameters()):
        assert q.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5 * max(1.0, p.grad.abs().max().item()))


def test_unsupported_architecture_is_refused():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match=r"model type 'gpt2' is not supported; supported: llama, qwen2, mistral"):
        tj_hf.apply(gpt2)


def test_the_kernels_name_is_not_mistaken_for_hugging_faces_package():
    """transformers probes for a package named `kernels` (the Hub kernels library); tilejit's has no
    __version__ and its metadata says tilejit, so transformers does not use it (docs/integrations.md)."""
    import kernels
    from transformers.utils import import_utils
    assert not hasattr(kernels, "__version__")
    assert not import_utils.is_kernels_available()


def test_engine_example_on_the_inference_ops_matches_generate():
    """examples/engine.py: a forward written with kernels.* only (paged KV cache, varlen prefill,
    split-KV decode, rope, silu_and_mul, sampling) gives transformers' greedy tokens, and sampled
    tokens that do not depend on the batch."""
    import argparse

    from examples import engine as E
    small = ["--layers", "1", "--hidden", "64", "--intermediate", "128", "--vocab", "128", "--batch", "3",
             "--prompt", "11", "--new", "4"]
    a = argparse.Namespace(arch="llama", layers=1, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=128,
                           batch=3, prompt=11, seed=0)
    model = E.build_model(a)
    eng = E.Engine(model, page_size=4, max_tokens=256)
    prompts = E.make_prompts(a)
    tokens, first = eng.generate(prompts, 4, lambda logits, step: E.sampling.greedy(logits))
    ref_tokens, ref_first = E.hf_generate(model, prompts, 4)
    assert torch.equal(tokens, ref_tokens)
    torch.testing.assert_close(first, ref_first, rtol=1e-4, atol=1e-4)
    assert len(eng.free) == 64   # every page handed back
    assert E.main(small + ["--sample"]) == 0
