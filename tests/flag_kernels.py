"""Two kernels that prove, without timing anything, that launches run at the same time as other
work: `wait_for_flag` sets `started`, then spins on atomic reads until something else sets the
flag (then stores 1), or gives up after `limit` reads (a few seconds for 200 million) and stores 0."""
from compiler import kernel, language as tl

PATIENCE = 200_000_000   # reads before wait_for_flag gives up


@kernel
def wait_for_flag(flag_ptr, started_ptr, out_ptr, limit):
    tl.atomic_xchg(started_ptr, 1)
    seen = tl.atomic_add(flag_ptr, 0)
    i = 0
    while (seen == 0) & (i < limit):
        seen = tl.atomic_add(flag_ptr, 0)
        i += 1
    tl.store(out_ptr, seen)


@kernel
def set_flag(flag_ptr):
    tl.atomic_xchg(flag_ptr, 1)


def compile_both():
    """Compiles both kernels (before a race, so compile time is not part of it)."""
    import torch
    one = torch.ones(1, dtype=torch.int32)
    wait_for_flag[(1,)](one, torch.zeros(1, dtype=torch.int32), torch.empty(1, dtype=torch.int32), 1)
    set_flag[(1,)](torch.zeros(1, dtype=torch.int32))
