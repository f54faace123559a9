"""Generated kernels for the Kunlun differential fuzzer (tests/test_kunlun_fuzz.py).

`cases(seed, per_family)` draws kernels from seeded generators: each a tile program written
as Python source (a module of its own, so the frontend reads it like any kernel file), its inputs
and its launch. Five families, each with random expressions, dtypes and block sizes:

- elementwise: a random expression tree over two loaded tiles and a scalar, masked tail;
- reduction: a row reduced (sum, max, min, argmax or argmin of an expression) and the row
  normalised by it;
- scan: a row's running sum of an expression, forward or reverse (cut into chunks with a
  carried prefix at large blocks);
- dot: a tiled matmul with a K loop, masked edges, an epilogue;
- masked loop: a row walked in BLOCK chunks with a carried tile (an online max and rescaled sum,
  FlagGems' softmax pattern among them), then walked again to store a function of the result.

- carried loop: a loop carrying a whole row that it reduces every iteration (a top-k filter), which
  only the memory plan's GM scratch tier fits at large blocks.

Block sizes run from a few lanes to tiles many times the size of a core's local memory, so the
Kunlun memory plan strip-mines, double-buffers loads and keeps tiles in GM scratch.
Inputs hold -inf and large values where the family allows, and lengths leave masked tails.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import random

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TL_DTYPE = {"fp32": "tl.float32", "fp16": "tl.float16", "bf16": "tl.bfloat16"}


@dataclasses.dataclass
class Case:
    id: str
    family: str
    source: str                 # the module's text
    name: str                   # the kernel's name in it
    make_inputs: object         # () -> list of launch arguments (fresh tensors)
    grid: tuple
    meta: dict                  # constexprs
    outputs: list[int]          # indices of the arguments written
    note: str                   # what was drawn, for failure messages

    def kernel(self, root: pathlib.Path):
        path = root / f"{self.name}.py"
        if not path.exists():
            path.write_text(self.source)
        spec = importlib.util.spec_from_file_location(self.name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return getattr(mod, self.name)


HEADER = "from compiler import kernel, language as tl\n\n\n@kernel\n"


# -- expressions ---------------------------------------------------------------------------------
def _expr(rng: random.Random, leaves: list[str], depth: int) -> str:
    """A random elementwise expression over `leaves`, bounded so that exp cannot overflow."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(leaves)
    a, b = _expr(rng, leaves, depth - 1), _expr(rng, leaves, depth - 1)
    return rng.choice([
        f"({a} + {b})", f"({a} - {b})", f"({a} * {b})", f"tl.maximum({a}, {b})", f"tl.minimum({a}, {b})",
        f"tl.where({a} > {b}, {a}, {b} * 0.5)", f"({a} / (tl.abs({b}) + 1.0))", f"tl.abs({a})",
        f"tl.exp(tl.minimum({a}, 8.0))", f"tl.sqrt(tl.abs({a}) + 0.25)", f"(-{a})",
    ])


def _data(rng: random.Random, gen: torch.Generator, shape, dtype: str, specials: bool) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen) * rng.choice([0.5, 1.0, 3.0])
    if specials and rng.random() < 0.5:
        flat = x.view(-1)
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),), generator=gen)
        flat[idx] = float("-inf")
    return x.to(DTYPES[dtype])


def _pick(rng, choices, weights=None):
    return rng.choices(choices, weights=weights)[0]


# -- families ------------------------------------------------------------------------------------
def _elementwise(rng, i, dt, k):
    out_dt = _pick(rng, list(DTYPES))
    block = _pick(rng, [64, 256, 1024, 4096, 8192])
    n = rng.randint(block // 2, 3 * block)
    expr = _expr(rng, ["x", "y", "s", "x * 0.5"], rng.randint(2, 4))
    name = f"fz_ew{i}"
    src = HEADER + f"""def {name}(x_ptr, y_ptr, o_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    r = {expr}
    tl.store(o_ptr + offs, r.to({TL_DTYPE[out_dt]}), mask=m)
"""
    seed = rng.getrandbits(31)

    def make():
        g = torch.Generator().manual_seed(seed)
        r = random.Random(seed)
        return [_data(r, g, [n], dt, False), _data(r, g, [n], dt, False),
                torch.zeros(n, dtype=DTYPES[out_dt]), 0.75, n]
    return name, src, make, ((n + block - 1) // block,), {"BLOCK": block}, [2], f"{dt}->{out_dt} BLOCK={block} n={n}"


def _reduction(rng, i, dt, k):
    block = _pick(rng, [32, 128, 1024, 2048, 8192])
    n = rng.randint(max(1, block // 2), block)
    kind = _pick(rng, ["sum", "max", "min", "argmax", "argmin"])
    other = {"sum": "0.0", "max": "-float('inf')", "min": "float('inf')", "argmax": "-float('inf')",
             "argmin": "float('inf')"}[kind]
    expr = _expr(rng, ["x", "x * 0.25"], rng.randint(1, 3))
    name = f"fz_red{i}"
    src = HEADER + f"""def {name}(x_ptr, o_ptr, r_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=m, other=0.0).to(tl.float32)
    e = tl.where(m, {expr}, {other})
    r = tl.{kind}(e, axis=0){".to(tl.float32)" if kind.startswith("arg") else ""}
    tl.store(r_ptr + row, r)
    tl.store(o_ptr + row * n + cols, (x - r).to({TL_DTYPE[dt]}), mask=m)
"""
    rows, seed = rng.randint(1, 3), rng.getrandbits(31)

    def make():
        g = torch.Generator().manual_seed(seed)
        return [_data(random.Random(seed), g, [rows, n], dt, False), torch.zeros(rows, n, dtype=DTYPES[dt]),
                torch.zeros(rows, dtype=torch.float32), n]
    return name, src, make, (rows,), {"BLOCK": block}, [1, 2], f"{dt} {kind} BLOCK={block} n={n} rows={rows}"


def _scan(rng, i, dt, k):
    block = _pick(rng, [16, 64, 256, 1024, 4096])
    n = rng.randint(max(1, block // 2), block)
    expr = _expr(rng, ["x"], rng.randint(0, 2))
    name = f"fz_scan{i}"
    src = HEADER + f"""def {name}(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=m, other=0.0).to(tl.float32)
    c = tl.cumsum(tl.where(m, {expr}, 0.0), axis=0{{reverse}})
    tl.store(o_ptr + row * n + cols, c, mask=m)
"""
    rows, seed = rng.randint(1, 3), rng.getrandbits(31)
    reverse = rng.random() < 0.5   # drawn last: the draws before it are the ones forward-only scans had
    src = src.replace("{reverse}", ", reverse=True" if reverse else "")

    def make():
        g = torch.Generator().manual_seed(seed)
        return [_data(random.Random(seed), g, [rows, n], dt, False), torch.zeros(rows, n), n]
    return (name, src, make, (rows,), {"BLOCK": block}, [1],
            f"{dt}{' reverse' if reverse else ''} BLOCK={block} n={n} rows={rows}")


def _dot(rng, i, dt, k):
    bm, bn, bk = (_pick(rng, [16, 32, 64]) for _ in range(3))
    M, N, K = rng.randint(bm // 2, 2 * bm), rng.randint(bn // 2, 2 * bn), rng.randint(bk // 2, 3 * bk)
    epi = _pick(rng, ["acc", "tl.maximum(acc, 0.0)", "acc * 0.5 + 1.0"])
    name = f"fz_dot{i}"
    src = HEADER + f"""def {name}(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], ({epi}).to({TL_DTYPE[dt]}),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
"""
    seed = rng.getrandbits(31)

    def make():
        g = torch.Generator().manual_seed(seed)
        r = random.Random(seed)
        return [_data(r, g, [M, K], dt, False), _data(r, g, [K, N], dt, False),
                torch.zeros(M, N, dtype=DTYPES[dt]), M, N, K]
    grid = ((M + bm - 1) // bm, (N + bn - 1) // bn)
    return name, src, make, grid, {"BM": bm, "BN": bn, "BK": bk}, [2], f"{dt} {bm}x{bn}x{bk} M={M} N={N} K={K}"


WALKS = ("masked", "split", "last_apart", "last_first")
# the statistics' walks and the store walk, every pair in turn (drawn by rotation, not at random, so
# that a few seeds cover every combination of loop shapes)
WALK_PAIRS = [(a, b) for a in WALKS for b in WALKS]


def _walk(style: str, load: str, other: str, body: str) -> str:
    """A loop over the row in BLOCK chunks, in one of the shapes real kernels give it: `masked`
    (every chunk masked); `split` (the whole chunks unmasked, then a masked loop over the tail);
    `last_apart` (every chunk but the last unmasked, the last in a masked loop of its own, even
    when the row is whole: FlagGems' softmax); `last_first` (the last chunk first, masked, in a
    loop of one trip, then the others downwards: FlagGems' second walk)."""
    masked, plain = load.format(mask=", mask=offs < n, other=" + other), load.format(mask="")
    loop = "    for start in range({lo}, {hi}, BLOCK):\n        offs = {at} + tl.arange(0, BLOCK)\n        x = {x}\n"
    if style == "masked":
        return loop.format(lo="0", hi="n", at="start", x=masked) + body + "\n"
    if style == "split":
        return ("    bound = n // BLOCK * BLOCK\n" + loop.format(lo="0", hi="bound", at="start", x=plain) + body + "\n"
                + loop.format(lo="bound", hi="n", at="start", x=masked) + body + "\n")
    last = "    last = (n + BLOCK - 1) // BLOCK * BLOCK - BLOCK\n"
    if style == "last_apart":
        return (last + loop.format(lo="0", hi="last", at="start", x=plain) + body + "\n"
                + loop.format(lo="last", hi="n", at="start", x=masked) + body + "\n")
    return (last + loop.format(lo="0", hi="BLOCK", at="last - start", x=masked) + body + "\n"
            + loop.format(lo="BLOCK", hi="n", at="last - start", x=plain) + body + "\n")


ONLINE_BODY = """        m_new = tl.maximum(m, x)
        dead = m_new == float('-inf')
        z = tl.where(dead, z, z * tl.exp(m - m_new) + tl.exp(x - m_new))
        m = m_new"""


def _masked_loop(rng, i, dt, k):
    """One to four statistics of a row, each over a walk of its own with a carried tile (an online
    max with a rescaled sum, as FlagGems' softmax; a carried sum or maximum), then a walk storing
    a function of them: kernels of very different sizes, which the host compiler inlines and
    optimises differently."""
    block = _pick(rng, [64, 512, 2048, 4096], [1, 1, 2, 2])
    n = rng.randint(block // 2, 5 * block)
    stats = rng.sample(["online", "squares", "absmax", "positive"], rng.choice([1, 1, 2, 3, 4]))
    style, out_style = WALK_PAIRS[k % len(WALK_PAIRS)]
    load = "tl.load(x_ptr + offs{mask}).to(tl.float32)"
    parts, ys = [], []
    for j, stat in enumerate(stats):
        if stat == "online":
            parts.append("    m = tl.full([BLOCK], value=float('-inf'), dtype=tl.float32)\n"
                         "    z = tl.full([BLOCK], value=0.0, dtype=tl.float32)\n"
                         + _walk(style, load, "-float('inf')", ONLINE_BODY)
                         + "    mr = tl.max(m, 0)\n"
                         "    zr = tl.sum(tl.where(m == float('-inf'), 0.0, z * tl.exp(m - mr)), 0)\n")
            ys.append("tl.exp(x - mr) / zr")
            continue
        upd = {"squares": "c + x * x", "absmax": "tl.maximum(c, tl.abs(x))",
               "positive": "c + tl.where(x > 0.0, x, 0.0)"}[stat]
        parts.append("    c = tl.zeros([BLOCK], dtype=tl.float32)\n"
                     + _walk(style, load, "0.0", f"        c = {upd}") + f"    c{j} = tl.sum(c, 0) + 1.0\n")
        ys.append(_pick(rng, [f"x / c{j}", f"x * c{j} - 1.0", f"tl.sqrt(tl.abs(x) / c{j})"]))
    other = "-float('inf')" if "online" in stats else "0.0"
    store = f"        tl.store(o_ptr + offs, ({' + '.join(ys)}).to({TL_DTYPE[dt]}), mask=offs < n)"
    name = f"fz_loop{i}"
    src = HEADER + f"""def {name}(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * n
    o_ptr += row * n
{"".join(parts)}{_walk(out_style, load, other, store)}"""
    rows, seed = rng.randint(1, 3), rng.getrandbits(31)

    def make():
        g = torch.Generator().manual_seed(seed)
        return [_data(random.Random(seed), g, [rows, n], dt, "online" in stats),
                torch.zeros(rows, n, dtype=DTYPES[dt]), n]
    return (name, src, make, (rows,), {"BLOCK": block}, [1],
            f"{dt} {' and '.join(stats)}, {style} walks, {out_style} store walk, BLOCK={block} n={n} rows={rows}")


def _carried_loop(rng, i, dt, k):
    """A loop that carries a whole row and reduces along it every iteration (a top-k filter; an
    iterative normalisation): no cut fits the row, so large blocks keep it in GM scratch."""
    block = _pick(rng, [64, 512, 2048, 8192], [1, 1, 2, 2])
    n = rng.randint(block // 2, block)
    trips = rng.randint(1, 6)
    body = _pick(rng, [
        "        m = tl.max(x, 0)\n        keep = tl.where(x == m, 1.0, keep)\n        x = tl.where(x == m, -float('inf'), x)",
        "        s = tl.sum(tl.where(cols < n, x * x, 0.0), 0)\n        x = x / tl.sqrt(s + 1.0)\n        keep = keep + x",
    ])
    other = "-float('inf')" if "tl.max" in body else "0.0"
    name = f"fz_carry{i}"
    src = HEADER + f"""def {name}(x_ptr, o_ptr, n, TRIPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other={other}).to(tl.float32)
    keep = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(TRIPS):
{body}
    tl.store(o_ptr + row * n + cols, keep.to({TL_DTYPE[dt]}), mask=cols < n)
"""
    rows, seed = rng.randint(1, 3), rng.getrandbits(31)

    def make():
        g = torch.Generator().manual_seed(seed)
        return [_data(random.Random(seed), g, [rows, n], dt, False), torch.zeros(rows, n, dtype=DTYPES[dt]), n]
    return (name, src, make, (rows,), {"TRIPS": trips, "BLOCK": block}, [1],
            f"{dt} {'top-k' if 'tl.max' in body else 'renormalise'} x{trips} BLOCK={block} n={n} rows={rows}")


FAMILIES = {"elementwise": _elementwise, "reduction": _reduction, "scan": _scan, "dot": _dot,
            "masked_loop": _masked_loop, "carried_loop": _carried_loop}


def cases(seed: int, per_family: int) -> list[Case]:
    """`per_family` kernels of every family, each family drawn from a generator of its own seeded
    with `seed`; the family's j-th kernel loads the j-th dtype of a cycle that starts with the
    narrow ones."""
    cycle = ["fp16", "bf16", "fp32"]
    out = []
    for family, draw in FAMILIES.items():
        rng = random.Random(f"{family}-{seed}")   # each family its own stream: one's draws move no other's
        for j in range(per_family):
            i = f"{seed}_{j}"
            name, src, make, grid, meta, outputs, note = draw(rng, i, cycle[(seed + j) % 3], seed * per_family + j)
            out.append(Case(f"{family}-{seed}-{j}", family, src, name, make, grid, meta, outputs, note))
    return out
