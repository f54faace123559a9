"""The one launch-grid normaliser of every launcher: a grid is 1 to 3 non-negative Python ints,
each within what the target can index, and their product within the target's program count."""
from __future__ import annotations

import operator

from ..errors import KernelArgumentError
from .protocol import Caps


def launch_grid(kernel: str, grid, caps: Caps) -> tuple[int, int, int] | None:
    """(g0, g1, g2) for a launch of `grid` (a tuple or list of ints), or None when the grid is empty
    (a zero extent: nothing runs, as on a GPU). Raises KernelArgumentError naming the kernel for a
    grid that is not 1-3 ints, has a negative extent, or exceeds the target's limits."""
    if not isinstance(grid, (tuple, list)):
        raise KernelArgumentError(f"kernel '{kernel}': the grid must be a tuple of 1 to 3 ints (or a callable "
                                  f"returning one), got {type(grid).__name__} {grid!r}")
    if not 1 <= len(grid) <= 3:
        raise KernelArgumentError(f"kernel '{kernel}': grid must have 1 to 3 dimensions, got {tuple(grid)!r}")
    dims = []
    for axis, g in enumerate(grid):
        try:
            n = operator.index(g)   # ints and int-likes (numpy ints); never floats or strings
        except TypeError:
            raise KernelArgumentError(f"kernel '{kernel}': grid axis {axis} is {type(g).__name__} {g!r}; grid "
                                      "sizes must be ints (use compiler.cdiv for a ceiling division)") from None
        if n < 0:
            raise KernelArgumentError(f"kernel '{kernel}': grid sizes must be >= 0, got {tuple(grid)!r}")
        if n > caps.max_grid[axis]:
            raise KernelArgumentError(f"kernel '{kernel}': grid axis {axis} has {n} programs, over this target's "
                                      f"limit of {caps.max_grid[axis]}; launch fewer, larger programs")
        dims.append(n)
    dims += [1] * (3 - len(dims))
    if 0 in dims:
        return None
    total = dims[0] * dims[1] * dims[2]
    if total > caps.max_programs:
        raise KernelArgumentError(f"kernel '{kernel}': {total} programs in one launch, over this target's limit "
                                  f"of {caps.max_programs}; launch fewer, larger programs")
    return dims[0], dims[1], dims[2]
