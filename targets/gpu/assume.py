"""What a compiled Triton binary assumes about its arguments, and the launch-time check.

Triton's own JIT looks at every launch's arguments and specialises on them (pointer alignment,
integers divisible by 16, integers equal to 1). tilejit compiles ahead of time (possibly on
another machine), so those assumptions are fixed when the binary is built and must be checked
when it runs:

- pointers: 16-byte aligned (`tt.divisibility = 16`) unless the binary is the variant built for
  the named pointers being unaligned; a misaligned pointer must never reach an aligned binary
  (its vectorised loads would read the wrong addresses);
- integers: `tt.divisibility = 16` where the IR parameter has the hint `divisible_by=16`; an
  integer equal to 1 is a constexpr baked into the IR, never a run-time argument; an `i32`
  parameter holds an int32 value. The dispatch key of `fn[grid](...)` already selects the
  matching specialisation; the check catches a launcher reused with other arguments.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.errors import KernelArgumentError
from compiler.ir import Function

from .spelling import param_names, triton_signature_type

ALIGN = 16   # bytes; what torch's allocator gives a tensor that starts its storage
_I32 = (-(2 ** 31), 2 ** 31)


class Assumptions:
    """Per kernel specialisation: the Triton signature and attributes of its binary, and the
    argument checks that go with them. `unaligned` names the pointer parameters (IR names)
    of a variant compiled without the alignment assumption."""

    def __init__(self, fn: Function, unaligned=()):
        self.kernel = fn.name
        self.arg_names = [p.name for p in fn.params]              # the user's names, for messages
        src_names = param_names(fn)                               # the generated source's names
        self.signature = {n: triton_signature_type(p.type.dtype) for n, p in zip(src_names, fn.params)}
        self.unaligned = tuple(sorted(unaligned))
        self.pointers = [i for i, p in enumerate(fn.params) if p.type.dtype.is_ptr()]
        self.aligned = [i for i in self.pointers if fn.params[i].name not in self.unaligned]
        ints = [i for i, p in enumerate(fn.params) if p.type.dtype.is_int() and not p.type.dtype.is_bool()]
        self.div16 = [i for i in ints if fn.params[i].hints.get("divisible_by") == 16]
        self.int32 = [i for i in ints if fn.params[i].type.dtype is D.int32]

    def attrs(self) -> dict:
        """`ASTSource(attrs=...)`: the divisibility Triton's JIT would have found for such arguments."""
        return {(i,): [["tt.divisibility", ALIGN]] for i in sorted(self.aligned + self.div16)}

    def misaligned(self, runtime_args) -> tuple[str, ...]:
        """IR names of the pointers this binary assumes aligned but that are not (usually ())."""
        bad = ()
        for i in self.aligned:
            if runtime_args[i].data_ptr() % ALIGN:
                bad += (self.arg_names[i],)
        return bad

    def check_ints(self, runtime_args) -> None:
        for i in self.div16:
            v = runtime_args[i]
            if v % ALIGN:
                raise KernelArgumentError(
                    f"kernel '{self.kernel}': argument '{self.arg_names[i]}' is {v}, but this binary was "
                    f"compiled assuming it is divisible by {ALIGN} (tt.divisibility). Launch through "
                    f"`{self.kernel}[grid](...)`, which selects the specialisation for the arguments given, "
                    "instead of reusing a compiled launcher with other arguments.")
        for i in self.int32:
            v = runtime_args[i]
            if not _I32[0] <= v < _I32[1]:
                raise KernelArgumentError(
                    f"kernel '{self.kernel}': argument '{self.arg_names[i]}' is {v}, outside the int32 range "
                    "this binary was compiled for. Launch through "
                    f"`{self.kernel}[grid](...)`, which specialises such values as int64.")
