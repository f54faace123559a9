"""Shape keys, bucketing and per-op problem builders of the autotuner.

A shape key uses only non-batch dimensions, so a tuned decision never changes with the batch size
(and a row's bits never depend on the batch it runs in):

- matmul: N and K, each aligned up to a multiple of 32. Weight dims are model constants and
  almost always multiples of 32 (4096, 1024, 11008, 14336), so they keep their own decisions,
  while odd sizes share the decision of the aligned size whose tiles they fill.
- layer_norm / rms_norm / add_rms_norm: N exact. It is the hidden size, one per model, and the
  best BLOCK depends on whether it divides N (no masked tail), which bucketing would blur.
- attention: head_dim exact (few values; it fixes BLOCK_D) and seq_k as a power of two (next
  power of two >= seq_k): the KV length changes every decode step, and the number of KV blocks
  moves smoothly with it, so a power-of-two bucket bounds the number of decisions to log2(seq_k).
"""
from __future__ import annotations

import json
import pathlib

OPS = ("matmul", "layer_norm", "rms_norm", "add_rms_norm", "attention")
NORMS = ("layer_norm", "rms_norm", "add_rms_norm")
DEFAULT_SHAPES = pathlib.Path(__file__).with_name("default_shapes.json")


def npow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def align32(n: int) -> int:
    return max(32, -(-int(n) // 32) * 32)


BUCKETS = {"matmul": {"N": "align32", "K": "align32"},
           **{op: {"N": "exact"} for op in NORMS},
           "attention": {"head_dim": "exact", "seq_k": "pow2"}}
_BUCKET_FNS = {"exact": int, "pow2": npow2, "align32": align32}


def key_dims(op: str, **dims) -> dict:
    """The bucketed non-batch dims of ``op`` (extra, batch-like dims are ignored)."""
    spec = BUCKETS.get(op)
    if spec is None:
        raise ValueError(f"autotune: unknown op {op!r}; choose one of {', '.join(OPS)}")
    return {d: _BUCKET_FNS[b](dims[d]) for d, b in spec.items()}


def shape_key(op: str, **dims) -> str:
    return ",".join(f"{k}={v}" for k, v in key_dims(op, **dims).items())


def problem_dims(op: str, shape: dict) -> dict:
    """The dims config_for reads, from a shapes-file entry."""
    if op == "matmul":
        return {"N": shape["N"], "K": shape["K"]}
    if op in NORMS:
        return {"N": shape["N"]}
    return {"head_dim": shape["head_dim"], "seq_k": shape["seq_k"], "seq_q": shape["seq_q"]}


def effective(op: str, config: dict, shape: dict) -> tuple[dict, str | None]:
    """(the config a wrapper actually launches for this shape, why it was pruned or None).

    config_for clamps BLOCK_N/BLOCK_K (matmul), BLOCK (norms) and BLOCK_N (attention) to the next
    power of two of the dim (>= 16); a candidate above that clamp is pruned (it would run as a
    smaller candidate). Attention's BLOCK_M is clamped to the next power of two of seq_q, as at
    run time (it groups query rows and never changes results)."""
    cfg = dict(config)
    why = _strict_order(op, cfg, shape)
    if why:
        return cfg, why
    if op == "matmul":
        for b, d in (("BLOCK_N", "N"), ("BLOCK_K", "K")):
            if cfg[b] > max(16, npow2(shape[d])):
                return cfg, f"{b}={cfg[b]} > clamp {max(16, npow2(shape[d]))} for {d}={shape[d]}"
    elif op in NORMS:
        if cfg["BLOCK"] > max(16, npow2(shape["N"])):
            return cfg, f"BLOCK={cfg['BLOCK']} > clamp {max(16, npow2(shape['N']))} for N={shape['N']}"
    else:
        if cfg["BLOCK_N"] > max(16, npow2(shape["seq_k"])):
            return cfg, f"BLOCK_N={cfg['BLOCK_N']} > clamp {max(16, npow2(shape['seq_k']))} for seq_k={shape['seq_k']}"
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], npow2(max(1, shape["seq_q"])))
        cfg.setdefault("BLOCK_D", npow2(shape["head_dim"]))
    return cfg, None


def _strict_order(op: str, cfg: dict, shape: dict) -> str | None:
    """In the strict policy the parameter that fixes a sum's order is one value on every target
    (kernels.norm.STRICT_BLOCK, kernels.attention.STRICT_BLOCK_N, clamped like config_for clamps
    them): candidates with another value are pruned."""
    from compiler.numerics import current_policy  # noqa: PLC0415
    from kernels import attention, norm  # noqa: PLC0415
    if current_policy() != "strict" or op not in NORMS + ("attention",):
        return None
    key, fixed, dim = (("BLOCK_N", attention.STRICT_BLOCK_N, "seq_k") if op == "attention"
                       else ("BLOCK", norm.STRICT_BLOCK, "N"))
    fixed = min(fixed, max(16, npow2(shape[dim])))
    return None if cfg.get(key) == fixed else f"strict fixes {key}={fixed} on every target"


def describe(op: str, shape: dict) -> str:
    if op == "matmul":
        return f"{shape['M']}x{shape['N']}x{shape['K']}"
    if op in NORMS:
        return f"[{shape['rows']}, {shape['N']}]"
    kv = f"/{shape['kv_heads']}" if shape.get("kv_heads", shape["heads"]) != shape["heads"] else ""
    return (f"({shape['batch']},{shape['heads']}{kv},{shape['seq_q']},{shape['head_dim']}) kv{shape['seq_k']}"
            + (" causal" if shape.get("causal") else ""))


class Problem:
    """Inputs, the tilejit call, the fp64 reference, torch eager and a tolerance for one shape."""

    def __init__(self, op: str, shape: dict):
        import torch  # noqa: PLC0415
        import torch.nn.functional as F  # noqa: PLC0415

        import kernels as K  # noqa: PLC0415

        self.op, self.shape = op, shape
        g = torch.Generator().manual_seed(0)
        s = shape
        if op == "matmul":
            a = torch.randn(s["M"], s["K"], generator=g)
            b = torch.randn(s["K"], s["N"], generator=g) * s["K"] ** -0.5
            self.args = (a, b)
            self.run = lambda cfg: K.matmul(a, b, config=cfg)
            self.ref = lambda: K.matmul_ref(a, b, out_dtype=torch.float64)
            self.eager = lambda: a @ b
            self.tol = 1e-4
        elif op in NORMS:
            x = torch.randn(s["rows"], s["N"], generator=g)
            w = torch.randn(s["N"], generator=g)
            if op == "layer_norm":
                bias = torch.randn(s["N"], generator=g)
                self.run = lambda cfg: K.layer_norm(x, w, bias, 1e-5, config=cfg)
                self.ref = lambda: K.layer_norm_ref(x, w, bias, 1e-5, out_dtype=torch.float64)
                self.eager = lambda: F.layer_norm(x, (s["N"],), w, bias, 1e-5)
            elif op == "rms_norm":
                self.run = lambda cfg: K.rms_norm(x, w, 1e-6, config=cfg)
                self.ref = lambda: K.rms_norm_ref(x, w, 1e-6, out_dtype=torch.float64)
                self.eager = lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            else:
                r = torch.randn(s["rows"], s["N"], generator=g)
                self.run = lambda cfg: K.add_rms_norm(x, r, w, 1e-6, config=cfg)[0]
                self.ref = lambda: K.add_rms_norm_ref(x, r, w, 1e-6, out_dtype=torch.float64)[0]

                def eager():
                    h = x + r
                    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
                self.eager = eager
            self.tol = 1e-4
        elif op == "attention":
            hkv = s.get("kv_heads", s["heads"])
            q = torch.randn(s["batch"], s["heads"], s["seq_q"], s["head_dim"], generator=g)
            k = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
            v = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
            causal = bool(s.get("causal", False))
            self.run = lambda cfg: K.attention(q, k, v, causal=causal, config=cfg)
            self.ref = lambda: K.attention_ref(q, k, v, causal=causal, out_dtype=torch.float64)
            # torch's is_causal is top-left aligned; equal to tilejit's bottom-right only when seq_q == seq_k
            if not causal or s["seq_q"] == s["seq_k"]:
                self.eager = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=hkv != s["heads"])
            else:
                self.eager = None
            self.tol = 1e-4
        else:
            raise ValueError(f"autotune: unknown op {op!r}")

    def check(self, out, ref) -> str | None:
        """None if ``out`` matches the reference, else the reason."""
        import torch  # noqa: PLC0415
        if tuple(out.shape) != tuple(ref.shape):
            return f"wrong output shape {tuple(out.shape)}, reference {tuple(ref.shape)}"
        if not torch.isfinite(out).all():
            return "output has non-finite values"
        err = (out.double() - ref).abs().max().item()
        scale = max(ref.abs().max().item(), 1e-30)
        if err > self.tol * scale:
            return f"does not match the reference: max abs error {err:.3e} > {self.tol:g} * max|ref| ({scale:.3e})"
        return None


def load_shapes(path=None, quick: bool = False) -> dict:
    """{op: [shape, ...]} from a shapes file: {"shapes": {op: [...]}, "quick": {op: [...]}}."""
    p = pathlib.Path(path) if path else DEFAULT_SHAPES
    doc = json.loads(p.read_text(encoding="utf-8"))
    if quick and "quick" in doc:
        return doc["quick"]
    return doc.get("shapes", doc)
