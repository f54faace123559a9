"""What a host-emulation bounds error names. The generated code marks each load and store with
`TJ_SITE(i)` (codegen/lowering.py: i is the op's index in the IR the memory plan lowered); the
emulation records the site, GM address and size of the first copy outside every tensor, and the
launcher turns it into an error naming the kernel, the source line of the access, the argument
its pointer comes from (targets/cfamily/origins.py) and the elements it touched against the
tensor's extent, with the fix. The site is described only when an error happens: the kernel's IR
is planned again (deterministic), never at launch."""
from __future__ import annotations

import linecache

from compiler.errors import KernelBoundsError
from compiler.target.args import view_range

from targets.cfamily.origins import PointerOrigins


def describe(target, fn, site: int) -> tuple[object, str, list[str]]:
    """(source location, op name, names of the arguments its pointer may come from) of site `site`."""
    ir = target.memory_plan(fn).ir
    ops = list(ir.walk())
    op = ops[site]
    origins = PointerOrigins(ir).of(op.operands[0])
    return op.loc, op.name, [ir.params[i].name for i in sorted(origins)]


def _extent(t) -> tuple[int, int, int]:
    """(element size, first and one-past-last element of `t`'s view, counted from its data pointer):
    what the emulation's DMA check lets a kernel touch (compiler.target.args.view_range)."""
    es = t.element_size()
    ptr, lo, hi = view_range(t, t.data_ptr())
    return es, (lo - ptr) // es, (hi - ptr) // es


def bounds_error(kernel: str, target_name: str, where, tensors: dict, fault, raw: str, error_cls=KernelBoundsError):
    """The error for emulation fault (site, GM address, bytes, store) of a launch of `kernel` whose
    pointer arguments are `tensors` ({name: tensor}); `where` = describe()'s result."""
    _site, addr, nbytes, store = fault
    loc, _op, names = where
    # the argument: the one its pointer comes from; where the IR leaves several, the one whose
    # view is nearest the address
    cands = {n: tensors[n] for n in names if n in tensors} or tensors

    def distance(t):
        _es, lo, hi = _extent(t)
        start, end = t.data_ptr() + lo * t.element_size(), t.data_ptr() + hi * t.element_size()
        return 0 if start <= addr < end else min(abs(addr - start), abs(addr - end))
    name = min(cands, key=lambda n: distance(cands[n]))
    t = cands[name]
    es, lo, hi = _extent(t)
    first = (addr - t.data_ptr()) // es
    line = linecache.getline(loc.filename, loc.lineno).strip() if loc is not None and loc.filename else ""
    at = f" at {loc.filename}:{loc.lineno}" + (f" (`{line}`)" if line else "") if loc is not None else ""
    which = f"argument '{name}'" + ("" if len(names) == 1 else f" (of {', '.join(names) or 'its arguments'}: the "
                                    "pointer may come from several; the nearest is named)")
    what = "store to" if store else "load from"
    return error_cls(
        f"kernel '{kernel}' on {target_name} (host emulation): {what} {which}{at} touches elements "
        f"[{first}, {first + max(1, nbytes // es)}) of it, outside its extent [{lo}, {hi}) (the elements of its "
        f"view, from its first to its last). Mask the access (e.g. mask=offs < n) or fix the offsets. The copy "
        f"was skipped; the outputs are incomplete. ({raw})")
