"""Sampling over logits [rows, V]: greedy (argmax, ties to the lowest index), random sampling
with temperature, top-k and top-p from a counter-based RNG, and softmax / log_softmax with a
temperature.

argmax is a two-step reduction with today's ops: the row maximum m (a BLOCK-wide running
maximum folded by tl.max), then the lowest index whose value equals m (a running minimum of
where(x == m, index, V), folded by tl.min). Max and min are exact and order-free, so the index is
the same on every target, in either policy, for any BLOCK. Logits are expected to be finite:
where they hold NaN the index is unspecified. Indices are computed in int32 (V < 2**31) and
returned as int64, like torch.argmax.

softmax / log_softmax of x / temperature in fp32: the row maximum, then sum(exp(x - m)) in a
BLOCK-wide fp32 tile (element j sums columns j, j+BLOCK, ... in ascending order) folded by one
tl.sum, then the outputs (log_softmax = x - m - log(sum)); rounded once to the output dtype
(the input's, or fp32 with out_dtype). BLOCK depends only on V (and is STRICT_BLOCK in the strict
policy), so a row's result never depends on the batch.

sample: per row r, with its own temperature T, top_k, top_p, seed and offset (tensors or one value
for all rows), x = logits * (1 / T) in fp32:
- top-k keeps the values >= the k-th largest (all ties of it: the kept set is a function of the
  values, not of an order), found exactly by bisection over the values' order-preserving int32
  keys (33 counting passes; counts are exact, so this is the same on every target and policy);
- top-p then keeps the smallest set of largest values whose probability mass (exp(x - max),
  summed like softmax's sum in fixed order) reaches top_p of the top-k mass: the threshold is
  again found by bisection over the keys, on that fixed-order mass;
- the draw is the Gumbel-max trick: argmax over the kept tokens of x_i - log(-log(u_i)) (ties to
  the lowest index), which samples exactly from softmax(x) restricted to the kept set. u_i is
  tl.uint_to_uniform_float of the first word of Philox 4x32-10 under key seed_lo with counters
  (i, offset, 0, seed_hi), seed_lo/seed_hi the low and high 32 bits of the 64-bit seed. A row's
  draw is a function of its logits, its parameters, its seed and its offset only: the same in any
  batch and, in the strict policy (log and exp defined there), on every target.
T = 0 means greedy for that row. Engines pass seed = the request's seed and offset = its step.
The passes run where they can change the draw: where a cut applies, each value's key and exp(x - m)
are computed once into scratch rows that the bisections' 33 passes read (the same values, so the
same bits); blocks whose maximum is below the threshold are skipped; a greedy row draws no noise.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_tensor
from .configs import select

STRICT_BLOCK = 128


@kernel
def _row_max(x_row, V, scale, BLOCK: tl.constexpr):
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        acc = tl.maximum(acc, x)
    return tl.max(acc, axis=0)


@kernel
def argmax_kernel(x_ptr, idx_ptr, V, sx, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    m = _row_max(x_row, V, 1.0, BLOCK)
    best = tl.full([BLOCK], V, tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        best = tl.minimum(best, tl.where((x == m) & (cols < V), cols, V))
    tl.store(idx_ptr + row, tl.min(best, axis=0))


@kernel
def softmax_kernel(x_ptr, y_ptr, V, sx, sy, scale, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    m = _row_max(x_row, V, scale, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        acc += tl.where(cols < V, tl.exp(x - m), 0.0)
    total = tl.sum(acc, axis=0)
    log_total = tl.log(total)
    inv = 1.0 / total
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=0.0).to(tl.float32) * scale
        if LOG:
            y = x - m - log_total
        else:
            y = tl.exp(x - m) * inv
        tl.store(y_ptr + row * sy + cols, y.to(y_ptr.dtype.element_ty), mask=cols < V)


@kernel
def _key(x):
    """An int32 whose order is the order of the fp32 values x (NaN aside)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@kernel
def _count_at_least(keys_row, bmax_row, V, t, BLOCK: tl.constexpr):
    """How many values of the row have a key >= t (int32: exact; blocks whose maximum is below t
    hold none)."""
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, V, BLOCK):
        if _key(tl.load(bmax_row + start // BLOCK)) >= t:
            cols = start + tl.arange(0, BLOCK)
            keys = tl.load(keys_row + cols, mask=cols < V, other=0)
            acc += tl.where((cols < V) & (keys >= t), 1, 0)
    return tl.sum(acc, axis=0)


@kernel
def _blocks_at_least(bmax_row, NB, t, BLOCK: tl.constexpr):
    """How many blocks of the row have a maximum whose key is >= t (int32)."""
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, NB, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.where((i < NB) & (_key(tl.load(bmax_row + i, mask=i < NB, other=float("-inf"))) >= t), 1, 0)
    return tl.sum(acc, axis=0)


@kernel
def _mass_at_least(keys_row, e_row, bmax_row, V, t, BLOCK: tl.constexpr):
    """sum of exp(x - m) over the values with a key >= t (int32; BLOCK lanes, then one fold); a
    skipped block would add exactly 0 to every lane."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        if _key(tl.load(bmax_row + start // BLOCK)) >= t:
            cols = start + tl.arange(0, BLOCK)
            keys = tl.load(keys_row + cols, mask=cols < V, other=0)
            acc += tl.where((cols < V) & (keys >= t), tl.load(e_row + cols, mask=cols < V, other=0.0), 0.0)
    return tl.sum(acc, axis=0)


@kernel
def sample_kernel(x_ptr, idx_ptr, bmax_ptr, keys_ptr, e_ptr, temp_ptr, k_ptr, p_ptr, seed_ptr, off_ptr, V, sx, NB,
                  BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    bmax_row = bmax_ptr + row * NB
    keys_row = keys_ptr + row * V
    e_row = e_ptr + row * V
    temp = tl.load(temp_ptr + row)
    greedy_row = temp == 0.0
    scale = tl.where(greedy_row, 1.0, 1.0 / tl.where(greedy_row, 1.0, temp))
    top_k = tl.load(k_ptr + row)
    top_p = tl.load(p_ptr + row)
    # each block's maximum (a scratch row), so the passes below skip blocks without candidates
    m = float("-inf")
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        bm = tl.max(tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale, axis=0)
        tl.store(bmax_row + start // BLOCK, bm)
        m = tl.maximum(m, bm)
    # each value's key and exp(x - m), once (scratch rows): the bisections below read them 33 times
    cut_k = (top_k > 0) & (top_k < V) & ~greedy_row
    cut_p = (top_p < 1.0) & ~greedy_row
    for start in range(0, tl.where(cut_k | cut_p, V, 0), BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        tl.store(keys_row + cols, _key(x), mask=cols < V)
        tl.store(e_row + cols, tl.exp(x - m), mask=cols < V)
    tl.debug_barrier()   # the passes below read what other lanes of this program stored
    # thresholds as keys, by bisection until hi = t + 1: keep key >= t; t always satisfies the
    # condition, hi never does, so the threshold found does not depend on where t starts. Every mid
    # lies in [key(-inf), key(m)] and is compared in int32.
    t = (top_k * 0).to(tl.int64) - 2139095041    # the key of -inf: every value is >= it
    hi_key = _key(m).to(tl.int64) + 1
    hi = hi_key
    if cut_k & (top_k <= NB):   # start at the k-th largest block maximum: the k largest blocks hold k values >= it
        while hi - t > 1:
            mid = t + (hi - t) // 2
            ok = _blocks_at_least(bmax_row, NB, mid.to(tl.int32), BLOCK) >= top_k
            t = tl.where(ok, mid, t)
            hi = tl.where(ok, hi, mid)
        hi = hi_key
    if cut_k:
        while hi - t > 1:
            mid = t + (hi - t) // 2
            ok = _count_at_least(keys_row, bmax_row, V, mid.to(tl.int32), BLOCK) >= top_k
            t = tl.where(ok, mid, t)
            hi = tl.where(ok, hi, mid)
    hi = hi_key
    if cut_p:
        target = top_p * _mass_at_least(keys_row, e_row, bmax_row, V, t.to(tl.int32), BLOCK)
        while hi - t > 1:
            mid = t + (hi - t) // 2
            ok = _mass_at_least(keys_row, e_row, bmax_row, V, mid.to(tl.int32), BLOCK) >= target
            t = tl.where(ok, mid, t)
            hi = tl.where(ok, hi, mid)
    # Gumbel-max over the kept tokens; ties to the lowest index
    seed_lo = tl.load(seed_ptr + 2 * row)
    seed_hi = tl.load(seed_ptr + 2 * row + 1)
    offset = tl.load(off_ptr + row)
    best_v = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.full([BLOCK], V, tl.int32)
    for start in range(0, V, BLOCK):
        if _key(tl.load(bmax_row + start // BLOCK)).to(tl.int64) >= t:
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
            score = x
            if not greedy_row:   # a greedy row draws no noise: its score is x itself
                bits, _, _, _ = tl.philox(seed_lo, cols, offset + cols * 0, cols * 0, seed_hi + cols * 0)
                u = tl.maximum(tl.uint_to_uniform_float(bits), 1e-30)   # u = 0 (p = 2**-31) would give -inf
                score = x - tl.log(-tl.log(u))
            score = tl.where((cols < V) & (_key(x).to(tl.int64) >= t), score, float("-inf"))
            better = score > best_v   # a lane sees ascending columns: a tie keeps the lower index
            best_i = tl.where(better, cols, best_i)
            best_v = tl.where(better, score, best_v)
    top = tl.max(best_v, axis=0)
    tl.store(idx_ptr + row, tl.min(tl.where((best_v == top) & (best_i < V), best_i, V), axis=0))


def _logits(op, x):
    check_tensor(op, "logits", x)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"{op}: logits must have a non-empty last dim (the vocabulary), got shape {tuple(x.shape)}")
    if x.shape[-1] >= 2 ** 31:
        raise ValueError(f"{op}: a vocabulary of {x.shape[-1]} entries needs 64-bit indices; at most 2**31 - 1")
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(1) == 1 else x2.contiguous()


def greedy(logits: torch.Tensor, *, config: dict | None = None) -> torch.Tensor:
    """argmax over the last dim (ties to the lowest index), int64 [*logits.shape[:-1]]."""
    op = "greedy"
    x2 = _logits(op, logits)
    check_device(op, logits=logits)
    idx = torch.empty(x2.shape[0], dtype=torch.int32, device=logits.device)
    if x2.shape[0]:
        cfg = dict(config) if config else select(ARGMAX, None, V=x2.shape[1])
        argmax_kernel[(x2.shape[0],)](x2, idx, x2.shape[1], x2.stride(0), **cfg)
    return idx.to(torch.int64).reshape(logits.shape[:-1])


def _softmax(op, log, logits, temperature, out_dtype, config):
    x2 = _logits(op, logits)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"{op}: temperature must be a positive number, got {temperature!r}")
    if out_dtype not in (None, torch.float32, logits.dtype):
        raise TypeError(f"{op}: out_dtype must be None, torch.float32 or the logits' dtype, got {out_dtype}")
    check_device(op, logits=logits)
    y = torch.empty(x2.shape, dtype=out_dtype or logits.dtype, device=logits.device)
    if x2.shape[0]:
        cfg = dict(config) if config else select(SOFTMAX, None, V=x2.shape[1])
        softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), y.stride(0), 1.0 / float(temperature),
                                       LOG=log, **cfg)
    return y.reshape(logits.shape)


def softmax(logits, temperature: float = 1.0, *, out_dtype=None, config=None):
    """softmax(logits / temperature) over the last dim."""
    return _softmax("softmax", False, logits, temperature, out_dtype, config)


def log_softmax(logits, temperature: float = 1.0, *, out_dtype=None, config=None):
    """log_softmax(logits / temperature) over the last dim."""
    return _softmax("log_softmax", True, logits, temperature, out_dtype, config)


def _per_row(op, name, val, rows, dtype, device, ok, what):
    """`val` (a number, or a tensor of one value per row) as a [rows] tensor of `dtype`, checked."""
    if isinstance(val, torch.Tensor):
        check_tensor(op, name, val, dims=1, dtypes=None)
        if val.shape[0] != rows:
            raise ValueError(f"{op}: argument '{name}' has {val.shape[0]} values, expected one per row ({rows})")
        t = val.to(device=device, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
    elif isinstance(val, bool) or not isinstance(val, (int, float)):
        raise TypeError(f"{op}: argument '{name}' must be a number or a tensor of one per row, got "
                        f"{type(val).__name__}")
    else:
        t = torch.full((rows,), val, dtype=torch.float64 if dtype.is_floating_point else torch.int64, device=device)
    if t.numel() and not bool(ok(t).all()):
        bad = t[~ok(t)][0].item()
        raise ValueError(f"{op}: argument '{name}' must be {what}, got {bad!r}")
    return t.to(dtype)


_I32 = (-2 ** 31, 2 ** 31)


def sample(logits: torch.Tensor, temperature=1.0, top_k=0, top_p=1.0, *, seed=0, offset=0,
           config: dict | None = None) -> torch.Tensor:
    """One token id per row of logits [..., V], int64 [*logits.shape[:-1]], drawn from
    softmax(logits / temperature) restricted to the top_k largest (0: all) and then to the top_p
    probability mass (1.0: all). Every parameter is one value or a tensor of one per row;
    temperature 0 is greedy. seed (64-bit) and offset (int32) choose the draw: the same
    (logits, parameters, seed, offset) give the same token in any batch."""
    op = "sample"
    x2 = _logits(op, logits)
    rows, dev = x2.shape[0], logits.device
    for name, t in (("seed", seed), ("top_k", top_k), ("offset", offset)):
        if isinstance(t, float) or (isinstance(t, torch.Tensor) and t.dtype.is_floating_point):
            raise TypeError(f"{op}: argument '{name}' must be an integer (or a tensor of integers)")
    temp = _per_row(op, "temperature", temperature, rows, torch.float32, dev,
                    lambda t: torch.isfinite(t) & (t >= 0), "a finite number >= 0 (0: greedy)")
    k = _per_row(op, "top_k", top_k, rows, torch.int32, dev, lambda t: (t >= 0) & (t < 2 ** 31),
                 "an int >= 0 (0: no top-k)")
    p = _per_row(op, "top_p", top_p, rows, torch.float32, dev, lambda t: (t > 0) & (t <= 1), "in (0, 1]")
    seeds = _per_row(op, "seed", seed, rows, torch.int64, dev, lambda t: t == t, "an integer")
    off = _per_row(op, "offset", offset, rows, torch.int32, dev, lambda t: (t >= _I32[0]) & (t < _I32[1]),
                   "an int32")
    check_device(op, logits=logits, temperature=temp, top_k=k, top_p=p, seed=seeds, offset=off)
    idx = torch.empty(rows, dtype=torch.int32, device=dev)
    if rows:
        cfg = dict(config) if config else select(SAMPLE, None, V=x2.shape[1])
        nb = cdiv(x2.shape[1], cfg["BLOCK"])
        bmax = torch.empty(rows, nb, dtype=torch.float32, device=dev)
        keys = torch.empty(rows, x2.shape[1], dtype=torch.int32, device=dev)   # the cut passes' scratch
        e = torch.empty(rows, x2.shape[1], dtype=torch.float32, device=dev)
        sample_kernel[(rows,)](x2, idx, bmax, keys, e, temp, k, p, seeds.view(torch.int32), off, x2.shape[1],
                               x2.stride(0), nb, **cfg)
    return idx.to(torch.int64).reshape(logits.shape[:-1])


def _philox_first_word(key_lo: torch.Tensor, c0, c1, c2, c3) -> torch.Tensor:
    """Philox 4x32-10's first output word (uint32 in an int64), key (key_lo, key_lo's sign word)."""
    m32 = 0xFFFFFFFF
    c0, c1, c2, c3 = (c.to(torch.int64) & m32 for c in torch.broadcast_tensors(*map(torch.as_tensor, (c0, c1, c2, c3))))
    k0 = key_lo.to(torch.int64) & m32
    k1 = torch.where(key_lo < 0, m32, 0).to(torch.int64)
    for _ in range(10):
        p0, p2 = 0xCD9E8D57 * c2, 0xD2511F53 * c0   # < 2**64 as unsigned; int64 keeps the low 64 bits
        hi0, hi2 = (p0 >> 32) & m32, (p2 >> 32) & m32
        c0, c1, c2, c3 = (hi0 ^ c1 ^ k0), p0 & m32, (hi2 ^ c3 ^ k1), p2 & m32
        k0, k1 = (k0 + 0x9E3779B9) & m32, (k1 + 0xBB67AE85) & m32
    return c0


def sample_ref(logits, temperature=1.0, top_k=0, top_p=1.0, *, seed=0, offset=0):
    """fp64 reference of `sample` (one row at a time, sorting for top-k/top-p), with the same
    Philox draws: for checking, not speed."""
    x2 = logits.reshape(-1, logits.shape[-1]).double()
    rows, V = x2.shape
    args = [t if isinstance(t, torch.Tensor) else torch.full((rows,), t) for t in
            (temperature, top_k, top_p, seed, offset)]
    out = []
    for r in range(rows):
        T, k, p, sd, off = (a[r].item() for a in args)
        x = x2[r] * (1.0 / T if T else 1.0)
        if not T:
            out.append(int(greedy_ref(x[None])[0]))
            continue
        keep = torch.ones(V, dtype=torch.bool)
        if 0 < k < V:
            keep &= x >= torch.sort(x, descending=True).values[k - 1]
        if p < 1.0:
            e = torch.where(keep, torch.exp(x - x.max()), 0.0)
            vals = torch.sort(x[keep], descending=True).values
            mass = torch.stack([e[x >= v].sum() for v in vals])
            keep &= x >= vals[int(torch.nonzero(mass >= p * e.sum())[0])]
        lo = torch.tensor(sd & 0xFFFFFFFF).to(torch.int32)   # the low word, as an int32
        bits = _philox_first_word(lo, torch.arange(V), off, 0, (sd >> 32) & 0xFFFFFFFF).to(torch.int32)
        u = torch.where(bits < 0, ~bits, bits).to(torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32)
        g = -torch.log(-torch.log(u.double().clamp_min(1e-30)))
        out.append(int(torch.argmax(torch.where(keep, x + g, -torch.inf))))
    return torch.tensor(out, dtype=torch.int64).reshape(logits.shape[:-1])


def greedy_ref(logits):
    """The lowest index of the maximum (torch.argmax does not promise which of equal values it picks)."""
    x = logits.double()
    m = x.max(-1, keepdim=True).values
    V = x.shape[-1]
    return torch.where(x == m, torch.arange(V), V).min(-1).values


def softmax_ref(logits, temperature=1.0, log=False, out_dtype=None):
    x = logits.double() / temperature
    y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
    return y.to(out_dtype or logits.dtype)


# ---------------------------------------------------------------------------------------------
# op specs
# ---------------------------------------------------------------------------------------------
def _problem(op):
    def build(s: dict) -> Problem:
        x = torch.randn(s["rows"], s["V"], generator=torch.Generator().manual_seed(0)) * 4
        if op == "greedy":
            return Problem(run=lambda cfg: greedy(x, config=cfg).double(), ref=lambda: greedy_ref(x).double(),
                           eager=lambda: torch.argmax(x, -1), tol=0.0)
        if op == "sample":
            opts = dict(temperature=0.8, top_k=50, top_p=0.9, seed=7, offset=torch.arange(s["rows"]))
            return Problem(run=lambda cfg: sample(x, config=cfg, **opts).double(),
                           ref=lambda: sample_ref(x, **opts).double(), eager=None, tol=0.0)
        return Problem(run=lambda cfg: log_softmax(x, config=cfg),
                       ref=lambda: softmax_ref(x, log=True, out_dtype=torch.float64),
                       eager=lambda: torch.log_softmax(x, -1))
    return build


def _probe(op):
    def probe(cfg: dict, shape: dict) -> None:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
        x = torch.zeros(2, 2 * cfg["BLOCK"] + 1, dtype=dt)
        if op == "greedy":
            greedy(x, config=cfg)
        elif op == "sample":
            sample(x, 0.5, 3, 0.5, config=cfg)
        else:
            softmax(x, config=cfg)
            log_softmax(x, config=cfg)
    return probe


def _spec(op, strict_fixed, blocks=(128, 256, 512, 1024, 2048, 4096), defaults=(1024, 128, 4096)):
    return OpSpec(
        name=op,
        key_dims={"V": "align32"},
        space=tuple({"BLOCK": b} for b in blocks),
        spaces={"scratchpad": tuple({"BLOCK": b} for b in (64, 128, 256) if b <= max(blocks))},
        defaults={kind: {"BLOCK": b} for kind, b in zip(("cache", "scratchpad", "simt"), defaults)},
        clamp=lambda cfg, dims: {**cfg, "BLOCK": min(cfg["BLOCK"], max(16, npow2(dims["V"])))},
        dims_of=lambda s: {"V": s["V"]},
        problem=_problem(op),
        describe=lambda s: f"[{s['rows']}, {s['V']}]",
        probe=_probe(op),
        work=lambda cfg, s: Work(programs=s["rows"], elements={"greedy": 2, "sample": 70}.get(op, 4) * s["V"],
                                 segments=4 * cdiv(s["V"], cfg["BLOCK"]), flops=4 * s["V"]),
        tune_shapes=({"label": "decode batch", "rows": 16, "V": 32000},),
        quick_shapes=({"label": "tiny", "rows": 4, "V": 1000},),
        strict_fixed=strict_fixed,
        # argmax: max/min are exact and order-free, so BLOCK never changes the index
        bit_neutral=frozenset({"BLOCK"}) if op == "greedy" else frozenset(),
    )


ARGMAX = _spec("greedy", {})
SOFTMAX = _spec("log_softmax", {"BLOCK": STRICT_BLOCK})   # softmax and log_softmax share the spec
# sample: BLOCK fixes the top-p mass sums' order; small blocks let the passes skip more of the row
SAMPLE = _spec("sample", {"BLOCK": 32}, blocks=(32, 64, 128, 256), defaults=(32, 64, 128))
SPECS = (ARGMAX, SOFTMAX, SAMPLE)

__all__ = ["greedy", "sample", "softmax", "log_softmax", "greedy_ref", "sample_ref", "softmax_ref", "argmax_kernel",
           "sample_kernel", "softmax_kernel", "STRICT_BLOCK", "SPECS"]
