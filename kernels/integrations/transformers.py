"""Hugging Face transformers models (Llama, Qwen2, Mistral) on tilejit's ops.

    pip install 'tilejit[hf]'            # the optional extra: transformers (this module is its only user)

    from transformers import LlamaConfig, LlamaForCausalLM
    from kernels.integrations import transformers as tilejit_hf
    model = tilejit_hf.apply(LlamaForCausalLM(config).eval())     # linear=True: every nn.Linear too
    model.generate(input_ids, attention_mask=mask, max_new_tokens=16, do_sample=False)

`apply(model)` changes that model only (module instances, never transformers' classes or module
functions, so other models in the process stay eager transformers):

- attention: the model's attention implementation becomes "tilejit", registered in transformers'
  AttentionInterface (the function) AND AttentionMaskInterface (its mask: transformers builds no
  mask at all for a name it does not find there). The mask is sdpa's boolean one (True = attend:
  padding, causal, sliding window) whenever one is needed; it is skipped only when the plain
  causal mask is exact (no padding and seq_q == seq_k, or seq_q == 1), and then kernels.attention
  runs with causal=True (bottom-right aligned, which equals top-left in those cases). Grouped-query
  heads are read in place (no repeat_kv). A query row that may attend no key (a left-padded row)
  gives 0, not NaN.
- RMSNorm modules -> `TilejitRMSNorm` (kernels.rms_norm; the same weight Parameter).
- rotary embedding application: each attention module's forward runs with its modeling module's
  `apply_rotary_pos_emb` bound to tilejit's rope (kernels.integrations._ops.rope).
- MLP act(gate) * up -> one fused act-and-mul kernel (`TilejitMLP`, same projections).
- linear=True: every nn.Linear (projections, lm_head) -> `TilejitLinear` (kernels.matmul on the
  same weight Parameter, stored column-major unless another module shares it: see TilejitLinear).

Everything runs as torch operators (tilejit::*), so the model still works with torch.compile
(fullgraph=True), torch.export (use_cache=False) and autograd.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import types

import torch
from torch import nn

try:
    import transformers
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError as e:   # the extra is not installed
    raise ImportError("kernels.integrations.transformers needs the optional dependency 'transformers': "
                      "pip install 'tilejit[hf]'") from e

from .. import attention as tj_attention, matmul as tj_matmul, rms_norm as tj_rms_norm
from ._ops import act_and_mul, rope

TRANSFORMERS_VERSION = transformers.__version__
NAME = "tilejit"   # the attention implementation's name ("/" or ":" would make transformers look for a Hub kernel)
# model_type -> modeling module and the prefix of its class names
ARCHS = {"llama": ("transformers.models.llama.modeling_llama", "Llama"),
         "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2"),
         "mistral": ("transformers.models.mistral.modeling_mistral", "Mistral")}
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu", "gelu_new": "gelu",
                  "gelu_fast": "gelu"}   # transformers' hidden_act -> act_and_mul's (gelu = the tanh form)


# ---------------------------------------------------------------------------------------------
# attention and its mask, through transformers' registries
# ---------------------------------------------------------------------------------------------
def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract: q [B, H, Sq, D], k/v [B, Hkv, Sk, D] (not
    repeated), the mask from `attention_mask_for` (bool, True = attend, or None); returns
    ([B, Sq, H, D], None)."""
    if dropout:
        raise ValueError(f"tilejit attention has no dropout (got {dropout}); call model.eval() or set "
                         "attention_dropout=0")
    for unsupported in ("softcap", "s_aux"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"tilejit attention does not support '{unsupported}'")
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise TypeError(f"tilejit attention takes a boolean mask (True = attend), got {attention_mask.dtype}: "
                        f"the model's masks must come from the '{NAME}' AttentionMaskInterface entry "
                        "(kernels.integrations.transformers.apply registers it)")
    causal = attention_mask is None and bool(kwargs.get("is_causal", getattr(module, "is_causal", True)))
    out = tj_attention(query, key, value, causal=causal, scale=scaling, mask=attention_mask)
    return out.transpose(1, 2), None


def attention_mask_for(batch_size, q_length, kv_length, allow_is_causal_skip=True, **kwargs):
    """sdpa's boolean mask, except that it may be skipped only where kernels.attention's
    bottom-right causal equals it (no padding and seq_q == seq_k or seq_q == 1); transformers'
    other skip (an empty static cache, top-left aligned) always gets the mask."""
    if q_length != 1 and q_length != kv_length:
        allow_is_causal_skip = False
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                     allow_is_causal_skip=allow_is_causal_skip, **kwargs)


def register() -> None:
    """Registers the "tilejit" attention implementation and its mask in transformers (idempotent)."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, attention_mask_for)


# ---------------------------------------------------------------------------------------------
# replacement modules (they hold the original Parameters: state_dict keys and ties are unchanged)
# ---------------------------------------------------------------------------------------------
class TilejitRMSNorm(nn.Module):
    """A transformers RMSNorm on kernels.rms_norm (the weight is cast to the input's dtype if they differ)."""

    def __init__(self, orig: nn.Module):
        super().__init__()
        self.weight = orig.weight
        self.variance_epsilon = orig.variance_epsilon

    def forward(self, hidden_states):
        w = self.weight if self.weight.dtype == hidden_states.dtype else self.weight.to(hidden_states.dtype)
        return tj_rms_norm(hidden_states, w, self.variance_epsilon)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class TilejitMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) with the act-and-mul fused into one kernel."""

    def __init__(self, orig: nn.Module, activation: str):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = orig.gate_proj, orig.up_proj, orig.down_proj
        self.activation = activation

    def forward(self, x):
        return self.down_proj(act_and_mul(self.gate_proj(x), self.up_proj(x), self.activation))


class TilejitLinear(nn.Module):
    """nn.Linear on kernels.matmul (x @ weight^T + bias) with the same weight Parameter.

    `store_transposed()` (apply() calls it for weights no other module shares) keeps that
    Parameter's values and shape [out, in] but stores them column-major, so that weight^T is a
    row-major [in, out] matrix: the dot then reads it along its rows, which streams the weight at
    decode faster than reading it down its columns (figures: kernels/matmul.py, `_cache`). The
    bits are the same either way (each output element is one ascending-k chain); state_dict()
    returns the weight contiguous, as nn.Linear's, so checkpoints do not change."""

    def __init__(self, orig: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = orig.in_features, orig.out_features
        self.weight = orig.weight
        self.bias = orig.bias
        # public since torch 2.5; the private hook before it takes the same arguments
        (getattr(self, "register_state_dict_post_hook", None) or self._register_state_dict_hook)(_contiguous_weight)

    def store_transposed(self) -> None:
        w = self.weight
        if not w.t().is_contiguous():
            w.data = w.data.t().contiguous().t()

    def forward(self, x):
        y = tj_matmul(x.reshape(-1, self.in_features), self.weight.t(), self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _contiguous_weight(module, state_dict, prefix, local_metadata) -> None:
    key = prefix + "weight"
    w = state_dict.get(key)
    if w is not None and not isinstance(w, nn.Parameter) and not w.is_contiguous():   # keep_vars=True: the Parameter
        state_dict[key] = w.contiguous()


def _rope_for(original):
    """apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) on tilejit's rope; a partial rotary
    (cos narrower than the head dim) keeps transformers' own function."""
    @functools.wraps(original)
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if cos.shape[-1] != q.shape[-1] or q.dim() != 4:
            return original(q, k, cos, sin, unsqueeze_dim)
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return rope(q, cos, sin), rope(k, cos, sin)
    return apply_rotary_pos_emb


def _rebind_global(fn, name: str, value):
    """A copy of function `fn` in which the global `name` is `value`; wrappers made with
    functools.wraps (a `__wrapped__` held in a closure cell) are copied around the copy. The
    original function, and so every other instance of its class, is untouched."""
    inner = getattr(fn, "__wrapped__", None)
    closure, new_inner = fn.__closure__, None
    if inner is not None and closure:
        new_inner = _rebind_global(inner, name, value)
        closure = tuple(types.CellType(new_inner) if _holds(c, inner) else c for c in closure)
    globs = {**fn.__globals__, name: value} if name in fn.__code__.co_names else fn.__globals__
    new = types.FunctionType(fn.__code__, globs, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    if new_inner is not None:
        new.__wrapped__ = new_inner
    return new


def _holds(cell, obj) -> bool:
    try:
        return cell.cell_contents is obj
    except ValueError:   # an empty cell
        return False


# ---------------------------------------------------------------------------------------------
# apply
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Applied:
    """What apply() swapped in a model (counts of module instances)."""

    arch: str
    attention: bool = False
    rms_norm: int = 0
    rope: int = 0
    mlp: int = 0
    linear: int = 0
    kept: list = dataclasses.field(default_factory=list)   # what stayed transformers' and why


def _arch(model) -> tuple[str, types.ModuleType, str]:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ARCHS:
        raise ValueError(f"kernels.integrations.transformers.apply: model type {model_type!r} is not supported; "
                         f"supported: {', '.join(ARCHS)}")
    mod_name, prefix = ARCHS[model_type]
    return model_type, importlib.import_module(mod_name), prefix


def _replace(model, cls, make) -> int:
    """Replaces every submodule that is an instance of `cls` by make(submodule); the count."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, cls):
                new = make(child)
                if new is not None:
                    setattr(parent, name, new)
                    n += 1
    return n


def apply(model, *, attention: bool = True, rms_norm: bool = True, rope: bool = True, mlp: bool = True,
          linear: bool = False):
    """Swaps tilejit's ops into a transformers Llama / Qwen2 / Mistral model (in place; returns it).
    What was swapped is in `model.tilejit_applied` (an `Applied`)."""
    model_type, modeling, prefix = _arch(model)
    done = Applied(model_type)
    if attention:
        register()
        model.set_attn_implementation(NAME)
        done.attention = True
    if rms_norm:
        done.rms_norm = _replace(model, getattr(modeling, f"{prefix}RMSNorm"), TilejitRMSNorm)
    if rope:
        forward = _rebind_global(getattr(modeling, f"{prefix}Attention").forward, "apply_rotary_pos_emb",
                                 _rope_for(modeling.apply_rotary_pos_emb))
        for m in model.modules():
            if isinstance(m, getattr(modeling, f"{prefix}Attention")):
                m.forward = types.MethodType(forward, m)
                done.rope += 1
    if mlp:
        act = HF_ACTIVATIONS.get(getattr(model.config, "hidden_act", None))
        if act is None:
            done.kept.append(f"MLP: hidden_act {model.config.hidden_act!r} has no fused act-and-mul")
        else:
            done.mlp = _replace(model, getattr(modeling, f"{prefix}MLP"), lambda m: TilejitMLP(m, act))
    if linear:
        done.linear = _replace(model, nn.Linear, TilejitLinear)
        # a weight tied to another module (an lm_head sharing the embedding) keeps its layout
        uses = collections.Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
        for m in model.modules():
            if isinstance(m, TilejitLinear) and uses[id(m.weight)] == 1:
                m.store_transposed()
    model.tilejit_applied = done
    return model


__all__ = ["apply", "register", "attention_forward", "attention_mask_for", "TilejitRMSNorm", "TilejitMLP",
           "TilejitLinear", "Applied", "ARCHS", "NAME", "TRANSFORMERS_VERSION"]
