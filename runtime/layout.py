"""Parallel layout: how `world` ranks split into tensor-, data- and pipeline-parallel groups.

Rank order is tp fastest, then dp, then pp (Megatron's order):

    rank = pp_index * (dp * tp) + dp_index * tp + tp_index

so a tensor-parallel group is `tp` consecutive ranks. Launchers number ranks node by node, so
consecutive ranks share a node, and tensor parallelism (an all_reduce per layer, the most
traffic) stays on the node's fast links, while pipeline parallelism (one activation per micro-batch)
crosses nodes. `ranks_per_node`, when given, is checked: a TP group must not straddle two nodes.

The layout is a pure function of (world, tp, pp, ranks_per_node), so every rank computes the same
groups without talking to the others; `torch.distributed.new_group` must be called with the same
groups in the same order on every rank, which `all_groups()` provides.

    lay = ParallelLayout(world=4, tp=2, pp=2)
    lay.tp_group(3)  -> (2, 3)        lay.pp_group(3) -> (1, 3)
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ParallelLayout", "LayoutError"]


class LayoutError(ValueError):
    """A layout that cannot be built (sizes that do not divide, a rank out of range, ...)."""


@dataclass(frozen=True)
class ParallelLayout:
    world: int
    tp: int = 1
    pp: int = 1
    ranks_per_node: int | None = None

    def __post_init__(self):
        for name in ("world", "tp", "pp"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayoutError(f"ParallelLayout: {name} must be a positive int, got {v!r}")
        if self.world % (self.tp * self.pp):
            raise LayoutError(f"ParallelLayout: world={self.world} is not divisible by tp*pp = "
                              f"{self.tp}*{self.pp} = {self.tp * self.pp}")
        rpn = self.ranks_per_node
        if rpn is not None:
            if not isinstance(rpn, int) or rpn < 1:
                raise LayoutError(f"ParallelLayout: ranks_per_node must be a positive int, got {rpn!r}")
            if self.world % rpn:
                raise LayoutError(f"ParallelLayout: world={self.world} is not a whole number of nodes "
                                  f"of {rpn} ranks")
            if rpn % self.tp:
                raise LayoutError(f"ParallelLayout: tp={self.tp} does not divide ranks_per_node={rpn}: a "
                                  "tensor-parallel group would straddle two nodes")

    @property
    def dp(self) -> int:
        """Data-parallel size: what is left of the world after tp and pp."""
        return self.world // (self.tp * self.pp)

    def _check_rank(self, rank: int) -> None:
        if not isinstance(rank, int) or not 0 <= rank < self.world:
            raise LayoutError(f"ParallelLayout: rank {rank!r} is outside 0..{self.world - 1}")

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp_index, dp_index, pp_index) of `rank`."""
        self._check_rank(rank)
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def rank_of(self, tp_index: int, dp_index: int = 0, pp_index: int = 0) -> int:
        return pp_index * self.dp * self.tp + dp_index * self.tp + tp_index

    def tp_group(self, rank: int) -> tuple[int, ...]:
        """The ranks that shard the same layers with `rank` (consecutive, on one node)."""
        _, d, p = self.coords(rank)
        return tuple(self.rank_of(t, d, p) for t in range(self.tp))

    def dp_group(self, rank: int) -> tuple[int, ...]:
        """The ranks holding the same shard of the same stage (replicas)."""
        t, _, p = self.coords(rank)
        return tuple(self.rank_of(t, d, p) for d in range(self.dp))

    def pp_group(self, rank: int) -> tuple[int, ...]:
        """The ranks holding the same shard across stages, in stage order (the pipeline)."""
        t, d, _ = self.coords(rank)
        return tuple(self.rank_of(t, d, p) for p in range(self.pp))

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of one kind ("tp", "dp" or "pp"), in a fixed order (the same on all ranks)."""
        fn = {"tp": self.tp_group, "dp": self.dp_group, "pp": self.pp_group}.get(kind)
        if fn is None:
            raise LayoutError(f"ParallelLayout: unknown group kind {kind!r}; choose tp, dp or pp")
        seen: dict[tuple[int, ...], None] = {}
        for r in range(self.world):
            seen.setdefault(fn(r))
        return list(seen)

    def all_groups(self) -> dict[str, list[tuple[int, ...]]]:
        return {k: self.groups(k) for k in ("tp", "dp", "pp")}

    def node_of(self, rank: int) -> int | None:
        self._check_rank(rank)
        return None if self.ranks_per_node is None else rank // self.ranks_per_node
