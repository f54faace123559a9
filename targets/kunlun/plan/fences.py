"""Memory fences, derived from the LM accesses the emitted code makes (the plan's last stage).

A core reaches its LM through three units: scalar loads/stores (S), the SIMD unit's vector
loads/stores (V) and the DMA engine (D: GM2LM writes LM, LM2GM reads it). V does not wait for
the others, nor they for it, so two accesses of overlapping LM bytes by V and another unit, one
of them a write, need a fence between them:

    vector store, then LM2GM or a scalar read      (the dot's accumulator, a staged store)
    scalar store, then a vector load               (zero fill, a masked load's `other`)
    vector load, then GM2LM over the same bytes    (the next tile landing on a buffer still read)

`mfence_lm()` orders S and V; `mfence()` also orders DMA and is used where D is one side. S and
synchronous D are ordered (GM2LM/LM2GM return when the copy is done), as public kernels rely on.
An asynchronous batch (GM2LM_ASYNC/LM2GM_ASYNC of a tile's rows) is waited for by the `mfence()`
the lowering emits right after it (`fenced_here`), so the stage sees it as one synchronous D access.
Sources (docs/kunlun.md, "Memory fences"): Kunlunxin's C/C++ guide, FlagTree's XPU membar pass,
FastDeploy's xpu_ops kernels (explicit `mfence_lm()` after vector stores).

`Fences` runs along the emission in program order with the arena placement: each access is
checked against the accesses still pending since the last fence; branches are joined (the union
of their pending accesses), and a loop's back edge gets a fence at the end of its body when what
is pending there conflicts with an access the body makes again. The emulation header checks the
same rules at run time (xpu_emulation.h), so a wrong placement fails a test.
"""
from __future__ import annotations

import dataclasses

LM_FENCE, FULL_FENCE = "mfence_lm", "mfence"


@dataclasses.dataclass(frozen=True)
class Access:
    """`unit` ("S", "V" or "D") reads or writes arena bytes lo..hi-1 of buffer `what`."""

    lo: int
    hi: int
    unit: str
    write: bool
    what: str

    def describe(self) -> str:
        return f"{self.unit} {'write' if self.write else 'read'} of {self.what}"


@dataclasses.dataclass(frozen=True)
class Pending:
    access: Access
    against: frozenset   # the units this access is not yet ordered against

    def conflicts(self, a: Access) -> bool:
        p = self.access
        return a.unit in self.against and p.lo < a.hi and a.lo < p.hi and (p.write or a.write)


# what an access leaves unordered until a fence: V races S and DMA, S races V; a synchronous
# DMA has completed when the call returns
_RACES = {"V": frozenset("SD"), "S": frozenset("V"), "D": frozenset()}


class Fences:
    def __init__(self):
        self.pending: list[Pending] = []
        self.frames: list[list] = []      # [kind, state saved at entry, first branch's state, accesses made]
        self.placed: list[str] = []       # one line per fence, for the plan listing

    def access(self, a: Access) -> str | None:
        """Records `a`; returns the fence that must come before it (already applied), or None."""
        for frame in self.frames:
            frame[3].append(a)
        hit = [p for p in self.pending if p.conflicts(a)]
        fence = None
        if hit:
            fence = FULL_FENCE if a.unit == "D" else LM_FENCE
            self.placed.append(f"{fence} before {a.describe()} (after {hit[0].access.describe()})")
            self._apply(fence)
        if _RACES[a.unit]:
            self.pending.append(Pending(a, _RACES[a.unit]))
        return fence

    def pending_again(self, accesses: list[Access]) -> None:
        """Accesses the code makes after a fence that was placed ahead of them (a fence goes at
        the start of its group, before the group's earlier accesses): pending again."""
        self.pending += [Pending(a, _RACES[a.unit]) for a in accesses if _RACES[a.unit]]

    def fenced_here(self, fence: str, why: str) -> None:
        """A fence the code places itself (an asynchronous DMA batch's wait)."""
        self.placed.append(f"{fence} that {why}")
        self._apply(fence)

    def _apply(self, fence: str) -> None:
        if fence == FULL_FENCE:
            self.pending = []
            return
        # mfence_lm orders S against V; a V access still races a later DMA
        self.pending = [Pending(p.access, p.against - {"S", "V"}) for p in self.pending
                        if p.against - {"S", "V"}]

    def open(self, kind: str) -> None:
        """Enters a loop body ("loop") or the first branch of an if ("branch")."""
        self.frames.append([kind, list(self.pending), None, []])

    def next_branch(self) -> None:
        frame = self.frames[-1]
        frame[2], self.pending = self.pending, list(frame[1])

    def close(self) -> str | None:
        """Leaves the region; for a loop, returns the fence to place at the end of its body (the
        back edge), or None. Branches join: what is pending after either one stays pending."""
        kind, saved, first, made = self.frames.pop()
        if kind == "branch":
            self.pending = _union(first if first is not None else saved, self.pending)
            return None
        hit = [(p, a) for p in self.pending for a in made if p.conflicts(a)]
        fence = None
        if hit:
            fence = FULL_FENCE if any(a.unit == "D" for _p, a in hit) else LM_FENCE
            p, a = hit[0]
            self.placed.append(f"{fence} at the end of a loop body ({p.access.describe()}, then "
                               f"{a.describe()} in the next iteration)")
            self._apply(fence)
        self.pending = _union(saved, self.pending)   # a loop may run no iteration
        return fence


def _union(a: list, b: list) -> list:
    return list(dict.fromkeys(a + b))
