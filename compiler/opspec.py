"""Op specs: everything the compiler's tools know about a library op, declared by the op itself.

A library op (kernels/matmul.py, kernels/norm.py, ...) exports `SPECS`, a tuple of `OpSpec`s. The
autotuner (`python -m compiler.autotune`), `config_for`, the pre-builder and the targets' cost
models read an op only through its spec, so adding an op is one new module that exports one, and
no tool names an op. Op libraries are found like target plugins: the `tilejit.ops` entry-point
group names objects that map op names to specs (the built-in library is `kernels:OP_SPECS`).

Configs depend only on an op's non-batch dimensions (`key_dims`), so a tuned decision, and with
it every result bit, is the same whatever the batch: see docs/numerics.md (batch invariance).
"""
from __future__ import annotations

import dataclasses
import threading
from importlib import metadata
from typing import Callable

from .errors import TilejitError
from .loader import LoadError, load_ref
from .names import clash_for

BUILTIN_LIBRARIES = {"kernels": "kernels:OP_SPECS"}


def npow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def align32(n: int) -> int:
    return max(32, -(-int(n) // 32) * 32)


# how a key dimension is bucketed: exact, next power of two, or aligned up to a multiple of 32
BUCKETS: dict[str, Callable[[int], int]] = {"exact": int, "pow2": npow2, "align32": align32}


@dataclasses.dataclass
class Problem:
    """One tuning problem: inputs built once, the op's call with a config, its fp64 reference, the
    torch eager baseline (None when torch has no equal op) and the relative tolerance."""

    run: Callable[[dict], object]
    ref: Callable[[], object]
    eager: Callable[[], object] | None
    tol: float = 1e-4

    def check(self, out, ref) -> str | None:
        """None if `out` matches the reference, else the reason."""
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


@dataclasses.dataclass(frozen=True)
class Work:
    """What one call of an op does, for a target's cost model: programs launched, and per program
    the elements moved between memory and the program's tiles, the contiguous memory segments
    they come in (one DMA each on a scratchpad target) and the floating-point operations."""

    programs: int
    elements: int
    segments: int
    flops: int
    axis0: int = 1     # programs along grid axis 0: those that may share tiles (Kunlun's SM staging)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One library op, as the tools see it.

    name          the op's name ("matmul")
    key_dims      the non-batch dims that key configs and decisions, with their bucket
                  ({"N": "align32", "K": "align32"}); nothing else may influence a config
    space         autotune candidates; `spaces` may replace them per tile class (Caps.tile_class)
    defaults      tile class -> the default config, or a function of the dims returning it ("cache"
                  is the fallback for any other class); a batch dim (one outside key_dims) may
                  choose only the params that cannot change a bit on the target (`free_params`)
    clamp         (config, dims) -> the config launched for those dims (block sizes shrunk to the
                  problem); the single definition config_for and the autotuner both apply
    dims_of       a shapes-file entry -> the dims config_for reads
    problem       a shapes-file entry -> `Problem`
    describe      a shapes-file entry -> a short text for tables
    probe         (config, shape) -> None: calls the op on tiny inputs with `config`, so that
                  render_only / compile_only see exactly the kernels a call launches
    work          (config, shape) -> `Work`, for cost models
    tune_shapes   the shapes `python -m compiler.autotune` tunes by default (serving shapes)
    quick_shapes  one or two tiny shapes (`--quick`, tests)
    strict_fixed  params that fix a summation order: in the strict policy one value on every
                  target (then clamped like any block size), so strict bits agree across targets
    bit_neutral   params that never change a result bit (they only group work into programs)
    follows       {param: batch dim}: a param that may follow a batch-like dim (shrink to its next
                  power of two) on targets that declare it bit-neutral (`Caps.bit_neutral`): there
                  it cannot change a bit, so small batches need not run large blocks
    dot_tiles     params that only cut a dot's K into tiles and its N into programs: bit-neutral
                  on targets whose dot chains across tiles (`Caps.dot_chains_across_tiles`)
    context_dims  dims that describe how a call runs rather than its size (e.g. whether its dots
                  run narrow on a matrix unit): fixed for every batch of the call's dtypes and
                  policy, so a default may choose any param by them, as by the key dims
    dot_k         the param that is the K tile of the kernel's dot (one of `dot_tiles`): launched
                  at least the target's `Caps.dot_k_grain`, so that the dot still chains across
                  K tiles bit for bit
    dot_rows      bit-neutral params that are the row count of the kernel's dots: a clamp to a
                  short problem leaves them at least the target's `Caps.dot_min_rows`, so a decode
                  block still runs on the matrix unit
    """

    name: str
    key_dims: dict
    space: tuple
    defaults: dict
    clamp: Callable[[dict, dict], dict]
    dims_of: Callable[[dict], dict]
    problem: Callable[[dict], Problem]
    describe: Callable[[dict], str]
    probe: Callable[[dict, dict], None]
    work: Callable[[dict, dict], Work]
    tune_shapes: tuple = ()
    quick_shapes: tuple = ()
    strict_fixed: dict = dataclasses.field(default_factory=dict)
    bit_neutral: frozenset = frozenset()
    spaces: dict = dataclasses.field(default_factory=dict)
    follows: dict = dataclasses.field(default_factory=dict)
    dot_tiles: frozenset = frozenset()
    dot_k: str | None = None
    context_dims: frozenset = frozenset()
    dot_rows: frozenset = frozenset()

    # -- keys -------------------------------------------------------------------------------------
    def key_of(self, **dims) -> dict:
        """The bucketed key dims (batch-like dims passed along are ignored)."""
        try:
            return {d: BUCKETS[b](dims[d]) for d, b in self.key_dims.items()}
        except KeyError as e:
            raise TilejitError(f"op '{self.name}': dimension {e} is needed to pick a config "
                               f"(key dims: {', '.join(self.key_dims)})") from None

    def shape_key(self, **dims) -> str:
        return ",".join(f"{k}={v}" for k, v in self.key_of(**dims).items())

    # -- configs ----------------------------------------------------------------------------------
    def __post_init__(self):
        # computed once per spec, when it is made: every call with an explicit config= checks
        # against it, also while torch.compile traces the call (which cannot enter the lock of a
        # lazy functools.cached_property on Python 3.11)
        object.__setattr__(self, "_config_keys", self._find_config_keys())

    def config_keys(self) -> tuple[frozenset, frozenset]:
        """(the parameters every config has, the parameters a config may have): from the candidate
        spaces, the static defaults, the strict-fixed parameters and what the clamps add."""
        return self._config_keys

    def _find_config_keys(self) -> tuple[frozenset, frozenset]:
        cands = [c for sp in (self.space, *self.spaces.values()) for c in sp]
        cands += [d for d in self.defaults.values() if isinstance(d, dict)]
        required = frozenset.intersection(*(frozenset(c) for c in cands)) if cands else frozenset()
        allowed = set().union(*(set(c) for c in cands), self.strict_fixed)
        for shape in self.quick_shapes[:1]:
            try:
                allowed |= set(self.clamp(dict(cands[0]), self.dims_of(shape))) if cands else set()
            except (KeyError, TypeError, ValueError):
                pass
        return required, frozenset(allowed)

    def config_problem(self, config) -> str | None:
        """Why `config` cannot run this op (a missing or unknown parameter, a block size that is
        not a positive int), or None."""
        why = config_problem(config)
        if why:
            return why
        required, allowed = self.config_keys()
        missing = sorted(required - set(config))
        if missing:
            return (f"it lacks {', '.join(missing)} (a config of {self.name} sets "
                    f"{', '.join(sorted(required))})")
        unknown = sorted(set(config) - allowed - CONFIG_LAUNCH_OPTIONS)
        if unknown:
            return f"{', '.join(unknown)} is not a parameter of {self.name} (its parameters: {', '.join(sorted(allowed))})"
        return None

    def candidates(self, caps) -> list[dict]:
        return [dict(c) for c in self.spaces.get(caps.tile_class, self.space)]

    def default_config(self, caps, dims: dict) -> dict:
        """The default for the target's tile class ("cache" for a class the op does not list). A
        default that is a function of the dims sees the batch dims too, but what they choose is
        kept only for `free_params` on this target: everything else is the default of the key
        dims alone, so the batch never changes a result bit."""
        d = self.defaults.get(caps.tile_class, self.defaults["cache"])
        if not callable(d):
            return dict(d)
        cfg = dict(d(dims))
        keyed = d({k: v for k, v in dims.items() if k in self.key_dims or k in self.context_dims})
        free = self.free_params(caps)
        return {k: (v if k in free else keyed[k]) for k, v in cfg.items()}

    def free_params(self, caps) -> frozenset:
        """The params that never change a result bit on a target with these caps: the op's own
        bit-neutral ones, the target's, and the dot's tiles where the dot chains across tiles."""
        return self.bit_neutral | caps.bit_neutral | (self.dot_tiles if caps.dot_chains_across_tiles else frozenset())

    def launched(self, config: dict, dims: dict, policy: str, caps=None) -> dict:
        """The config a call launches on a target with `caps` (None: no target's declarations):
        strict's fixed order parameters, then the clamps, then the params that follow a batch dim
        where the target declares them bit-neutral, dot row blocks no lower than its
        `dot_min_rows`, and the dot's K tile a multiple of its `dot_k_grain` (a pow2 raised to it)."""
        neutral = caps.bit_neutral if caps is not None else frozenset()
        dot_min_rows = caps.dot_min_rows if caps is not None else 1
        cfg = dict(config)
        if policy == "strict":
            cfg.update(self.strict_fixed)
        cfg = self.clamp(cfg, dims)
        for param, dim in self.follows.items():
            if param in neutral and param in cfg and dims.get(dim) is not None:
                cfg[param] = min(cfg[param], npow2(max(1, dims[dim])))
        for param in self.dot_rows & cfg.keys():   # never past the config's own value
            cfg[param] = max(cfg[param], min(config.get(param, cfg[param]), dot_min_rows))
        if caps is not None and self.dot_k in cfg:
            cfg[self.dot_k] = max(cfg[self.dot_k], caps.dot_k_grain)
        return cfg

    def effective(self, config: dict, dims: dict, policy: str, caps=None) -> tuple[dict, str | None]:
        """(the config launched for candidate `config`, why the candidate is pruned or None). A
        candidate is pruned when a parameter that can change result bits would not run as given
        (it runs as a smaller candidate, measured on its own); bit-neutral parameters (the op's
        and the target's) may follow the shape."""
        eff = self.launched(config, dims, policy, caps)
        neutral = caps.bit_neutral if caps is not None else frozenset()
        for k, v in config.items():
            if eff.get(k) == v or k in self.bit_neutral or k in neutral:
                continue
            if policy == "strict" and k in self.strict_fixed:
                return eff, f"strict fixes {k}={eff[k]} on every target"
            return eff, f"{k}={v} runs as {k}={eff.get(k)} for {self.shape_key(**dims)}"
        return eff, None


# launch options a library op's config may carry beside its block sizes (a gpu default, or an
# autotuner candidate, picks warps and pipeline stages with its tiles); targets whose build does
# not honour them ignore them (compiler/launch_options.py)
CONFIG_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages"})


def config_problem(config) -> str | None:
    """Why `config` is not a config at all (block sizes are positive ints by name), or None."""
    if not isinstance(config, dict) or not config:
        return f"a config is a non-empty dict of block sizes, got {config!r}"
    for k, v in config.items():
        if not isinstance(k, str):
            return f"parameter names are strings, got {k!r}"
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{k}={v!r} is not an int"
        if not 1 <= v < 2 ** 31:
            return f"{k}={v} is not a positive block size (1 to 2**31 - 1)"
    return None


# ---------------------------------------------------------------------------------------------
# op libraries: the registry the tools read specs from
# ---------------------------------------------------------------------------------------------
_lock = threading.Lock()
_specs: dict[str, OpSpec] | None = None


def library_ops() -> dict[str, OpSpec]:
    """Every op spec of every installed op library, by name (loaded once, at the first call)."""
    global _specs
    if _specs is None:
        with _lock:
            if _specs is None:
                _specs = _load_libraries()
    return _specs


def _load_libraries() -> dict[str, OpSpec]:
    refs = dict(BUILTIN_LIBRARIES)
    try:
        refs.update({ep.name: ep.value for ep in metadata.entry_points(group="tilejit.ops")})
    except Exception:  # noqa: BLE001 - a broken environment must not hide the built-in library
        pass
    found: dict[str, OpSpec] = {}
    for name, ref in refs.items():
        try:
            specs = load_ref(ref, f"op library '{name}'")
        except LoadError as e:
            raise (clash_for(ref) or TilejitError(str(e))) from None
        for op, spec in dict(specs).items():
            if not isinstance(spec, OpSpec):
                raise TilejitError(f"op library '{name}' ({ref}): '{op}' is not a compiler.opspec.OpSpec")
            found.setdefault(op, spec)
    return found


def op_spec(name: str) -> OpSpec:
    specs = library_ops()
    try:
        return specs[name]
    except KeyError:
        raise TilejitError(f"unknown library op {name!r}; known: {', '.join(sorted(specs))}") from None
