"""What a Kunlun memory plan decides, as data: the GM tensors a program reads and writes, the LM
buffers it holds (each at an offset of one per-core arena, with the live range that let it share
bytes with others), the SM buffers of its cluster, every DMA between the spaces, and the
strip-mining steps that made the tiles fit. The renderer prints `listing()` at the top of the
`.xpu` source; the LM budget check, the autotuner's footprint probe and the cost model read
`lm_bytes` and `dma` from here and from nowhere else."""
from __future__ import annotations

import dataclasses
import linecache
import re

from compiler.ir import Function, Value

ALIGN = 64   # __simd__: vector loads and stores need 64-byte aligned LM
NOMINAL_TRIPS = 8   # a run-time loop's trip count when ranking plans (unknown at compile time)


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclasses.dataclass(frozen=True)
class GMTensor:
    name: str
    dtype: str          # element dtype in global memory
    written: bool


@dataclasses.dataclass
class LMBuffer:
    """One LM buffer: `nbytes` at `offset` of the arena, live over op times [start, end]."""

    index: int
    name: str
    ctype: str
    numel: int
    nbytes: int
    value: Value | None
    kind: str                    # "value" (holds an IR value) or "scratch" (within one op)
    start: int = 0
    end: int = 0
    offset: int = 0
    shares: str | None = None    # written in place over this (dying) buffer
    inplace: tuple = ()          # buffers it may overwrite in place (read at the same index only)

    def source_name(self) -> str:
        return source_name(self.value) or self.name


@dataclasses.dataclass(frozen=True)
class SMBuffer:
    name: str
    nbytes: int
    purpose: str


@dataclasses.dataclass(frozen=True)
class DMA:
    """One DMA site of the emitted program: `transfers` copies of `elems` elements of `elem_bytes`
    each time the site runs; `static_trips` is the product of the trip counts of the enclosing
    loops known at compile time and `runtime_loops` the number of enclosing loops whose trip count
    depends on the arguments."""

    kind: str                    # GM2LM, LM2GM, GM2SM, SM2LM
    buffer: str
    elem_bytes: int
    elems: int
    transfers: int
    static_trips: int
    runtime_loops: int
    time: int
    shared: bool = False         # moved once per cluster (SM staging), not per core
    batched: bool = False        # the transfers are issued asynchronously and waited for once
    # a tile fetched one iteration ahead (double buffering): the trip count of the loop it runs
    # in (0: known at run time only); None for every other site
    ahead_in: int | None = None
    scratch: bool = False        # to or from the GM scratch tier (scratch.py), not a kernel tensor

    def _runs(self, trips: float) -> float:
        runs = self.static_trips * trips ** self.runtime_loops
        if self.ahead_in is not None:   # the loop's last iteration fetches nothing
            n = self.ahead_in or trips
            runs *= (n - 1) / n if n else 0.0
        return runs

    def bytes_per_run(self, trips: float) -> float:
        return self.elem_bytes * self.elems * self.transfers * self._runs(trips)

    def count_per_run(self, trips: float) -> float:
        return self.transfers * self._runs(trips)

    def waits_per_run(self, trips: float) -> float:
        """The transfers the core waits for one at a time: a batch's all at once, a tile fetched
        ahead not at all (its setup and flight overlap the iteration before; where the copy is
        slower than that iteration, the memory term of the estimate is the larger one)."""
        if self.ahead_in is not None:
            return 0.0
        return self.count_per_run(trips) / (self.transfers if self.batched else 1)


@dataclasses.dataclass
class MemoryPlan:
    ir: Function                 # the kernel after the plan's IR stages (int64 narrowing, strip-mining)
    arch: str
    budget: int                  # LM bytes the arena may use (LM - stack reserve)
    gm: list[GMTensor]
    lm: list[LMBuffer]
    sm: list[SMBuffer]
    dma: list[DMA]
    steps: list[str]             # strip-mining decisions, in order
    lm_bytes: int                # the arena: every LM buffer at its offset
    # element operations per program in the emitted code (run-time loops at NOMINAL_TRIPS), and
    # how many of them the 16-lane vector unit does: set by the renderer after emission
    element_ops: float = 0.0
    vector_ops: float = 0.0
    # the DMA sites of the kernel as written, before strip-mining (the same as `dma` when no cut)
    written_dma: list[DMA] = dataclasses.field(default_factory=list)
    # loads double-buffered across loop iterations (codegen/prefetch.py), but those in `skip`
    # (their second slot did not fit the arena)
    prefetch: bool = False
    skip: frozenset = frozenset()
    # the GM scratch tier (scratch.py): tiles kept in the core's slot of the launcher's workspace
    scratch: list = dataclasses.field(default_factory=list)
    cores: int = 0                 # the arch's clusters x cores: the slots of a workspace

    @property
    def scratch_slot(self) -> int:
        """Bytes of one core's scratch slot (0: nothing spilled to GM)."""
        from .scratch import slot_bytes   # noqa: PLC0415 - scratch.py imports this module
        return slot_bytes(self.scratch)

    @property
    def vector_share(self) -> float:
        return self.vector_ops / self.element_ops if self.element_ops else 0.0

    def dma_totals(self, team: float = 1) -> tuple[float, float, float, float]:
        """Per program, run-time loops at NOMINAL_TRIPS: the bytes the plan moves and the transfers
        a core waits for (a staged site's once per `team` programs; an asynchronous batch's once),
        then the bytes and transfers the kernel as written names (one wait per transfer)."""
        return (sum(d.bytes_per_run(NOMINAL_TRIPS) / (team if d.shared else 1) for d in self.dma),
                sum(d.waits_per_run(NOMINAL_TRIPS) / (team if d.shared else 1) for d in self.dma),
                sum(d.bytes_per_run(NOMINAL_TRIPS) for d in self.written_dma),
                sum(d.count_per_run(NOMINAL_TRIPS) for d in self.written_dma))

    @property
    def dma_growth(self) -> tuple[float, float]:
        """(bytes, transfers) the plan moves over what the kernel as written names: a strip-mined
        pass that re-reads a tile once per chunk of another axis moves it more than once."""
        return dma_growth([self.dma_totals()])

    @property
    def sm_slot(self) -> int:
        """SM bytes one team's staged tiles take (0: nothing staged)."""
        return sum(s.nbytes for s in self.sm)

    @property
    def peak_live_bytes(self) -> int:
        """The most bytes live at one time (the arena can be larger: alignment, fragmentation)."""
        times = sorted({b.start for b in self.lm})
        return max((sum(align(b.nbytes) for b in self.lm if b.start <= t <= b.end and b.shares is None)
                    for t in times), default=0)

    def listing(self) -> str:
        lines = [f"memory plan ({self.arch}): LM arena {self.lm_bytes} of {self.budget} bytes per core"
                 + (f", SM {sum(s.nbytes for s in self.sm)} bytes per cluster" if self.sm else "")]
        for step in self.steps:   # a cut, or a rewrite that lets the cuts fit (one read per role, GM scratch)
            lines.append(f"  {'strip-mined' if ' -> chunks of ' in step else 'plan'}: {step}")
        for t in self.gm:
            lines.append(f"  GM {t.name}: {t.dtype}{' (written)' if t.written else ''}")
        for b in self.lm:
            share = f", in place over {b.shares}" if b.shares else ""
            src = source_name(b.value)
            lines.append(f"  LM {b.name} @{b.offset}: {b.nbytes} bytes, {b.ctype}[{b.numel}], live "
                         f"{b.start}..{b.end}{share}" + (f" ({src})" if src else ""))
        for s in self.sm:
            lines.append(f"  SM {s.name}: {s.nbytes} bytes ({s.purpose})")
        for s in self.scratch:
            lines.append(f"  GM scratch {s.name} @{s.offset}: {s.nbytes} bytes, {s.dtype.name}[{s.numel}], {s.what}")
        if self.scratch:
            lines.append(f"  GM scratch workspace: {self.scratch_slot} bytes per core, {self.scratch_slot * self.cores} "
                         "bytes a launch (allocated once per kernel and size, reused)")
        kinds: dict[str, int] = {}
        for d in self.dma:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        if kinds:
            ahead = sum(d.ahead_in is not None for d in self.dma)
            batched = sum(d.batched for d in self.dma) - ahead
            lines.append("  DMA sites: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
                         + (f"; {batched} of them asynchronous row batches (one mfence each)" if batched else "")
                         + (f"; {ahead} fetched one loop iteration ahead into a second LM slot" if ahead else ""))
        if self.element_ops:
            lines.append(f"  work per program: {self.element_ops:.0f} element operations, "
                         f"{100 * self.vector_share:.0f}% on the vector unit")
        if self.scratch:
            total = sum(d.bytes_per_run(NOMINAL_TRIPS) for d in self.dma)
            spilled = sum(d.bytes_per_run(NOMINAL_TRIPS) for d in self.dma if d.scratch)
            lines.append(f"  GM scratch traffic: {100 * spilled / total if total else 0:.0f}% of the DMA bytes per program")
        if self.steps:
            nbytes, transfers = self.dma_growth
            lines.append(f"  DMA per program: {nbytes:.2f}x the bytes and {transfers:.2f}x the transfers of "
                         f"the kernel as written (re-reads of the cut passes); an asynchronous batch counts as one transfer")
        return "\n".join(lines)


def dma_growth(totals) -> tuple[float, float]:
    """`MemoryPlan.dma_growth` of several programs' `dma_totals()` together."""
    planned_b, planned_n, written_b, written_n = (sum(t[i] for t in totals) for i in range(4))
    return (planned_b / written_b if written_b else 1.0), (planned_n / written_n if written_n else 1.0)


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?:[-+*/]?=)(?!=)")


def source_name(v: Value | None) -> str:
    """The kernel-source name a value was bound to (`x` in `x = tl.load(...)`), read from its
    source line; '' when the line binds no name."""
    if v is None or v.loc is None:
        return ""
    if v.name_hint:
        return v.name_hint
    line = linecache.getline(v.loc.filename, v.loc.lineno) if v.loc.filename else ""
    m = _ASSIGN.match(line)
    return m.group(1).replace(" ", "") if m else ""


def describe_value(v: Value | None) -> str:
    """`name` (line N) for error messages."""
    if v is None:
        return "a scratch buffer"
    name = source_name(v)
    where = f"line {v.loc.lineno}" if v.loc is not None else "no source line"
    return f"'{name}' ({where})" if name else f"the value made at {where}"
