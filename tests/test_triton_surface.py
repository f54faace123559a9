"""The host-side surface of the Triton front door that real code touches: the error classes it
catches, the dtype objects' attributes (against the installed Triton's own), and
`triton.reinterpret` / TensorWrapper arguments (the front door's and Triton's)."""
import pytest
import torch

from compiler import CompilationError, triton
from compiler.errors import OutOfResources, TilejitError
from compiler.triton import language as tl

pytestmark = pytest.mark.compile
real_tl = pytest.importorskip("triton.language")


def test_error_classes_real_code_catches():
    from compiler.triton.compiler.errors import CompilationError as CE  # noqa: PLC0415
    from compiler.triton.runtime import errors as RE  # noqa: PLC0415
    assert CE is triton.CompilationError is CompilationError
    for cls in (CompilationError, TilejitError, RE.OutOfResources, RE.InterpreterError, RE.PTXASError,
                RE.AutotunerError, triton.errors.TritonError):
        assert issubclass(cls, triton.TritonError)
    from targets.kunlun.plan.explain import LMBudgetError  # noqa: PLC0415
    assert issubclass(LMBudgetError, triton.OutOfResources) and issubclass(LMBudgetError, CompilationError)
    e = triton.OutOfResources(200000, 98304, "shared memory")
    assert (e.required, e.limit, e.name) == (200000, 98304, "shared memory") and "shared memory" in str(e)


def test_a_compile_error_is_caught_as_triton_error():
    @triton.jit
    def bad(X):
        tl.store(X, undefined_name)  # noqa: F821

    with pytest.raises(triton.TritonError, match="undefined_name"):
        bad[(1,)](torch.zeros(1))


def test_triton_runtime_errors_become_ours():
    from triton.runtime import errors as R  # noqa: PLC0415
    from targets.gpu.launcher import tilejit_error  # noqa: PLC0415
    ours = tilejit_error(R.OutOfResources(70000, 65536, "shared memory"))
    assert isinstance(ours, OutOfResources)
    assert (ours.required, ours.limit, ours.name) == (70000, 65536, "shared memory")
    assert isinstance(tilejit_error(R.InterpreterError("boom")), triton.runtime.errors.InterpreterError)
    assert tilejit_error(ValueError("x")) is None


ATTRS = ("primitive_bitwidth", "itemsize", "fp_mantissa_width", "exponent_bias")
PREDICATES = ("is_fp8", "is_fp8e4nv", "is_fp8e4b15", "is_fp8e5", "is_fp8e5b16", "is_fp16", "is_bf16", "is_fp32",
              "is_fp64", "is_int1", "is_int8", "is_int16", "is_int32", "is_int64", "is_uint8", "is_uint16",
              "is_uint32", "is_uint64", "is_floating", "is_standard_floating", "is_int_signed", "is_int_unsigned",
              "is_int", "is_bool", "is_ptr", "is_block")


@pytest.mark.parametrize("name", real_tl.dtype.SINT_TYPES + real_tl.dtype.UINT_TYPES + real_tl.dtype.FP_TYPES)
def test_dtype_attributes_match_triton(name):
    real, ours = real_tl.dtype(name), tl.dtype(name)
    assert ours is getattr(tl, {"int1": "int1", "fp8e4b15": "float8e4b15", "fp8e4b8": "float8e4b8",
                                "fp8e4nv": "float8e4nv", "fp8e5": "float8e5", "fp8e5b16": "float8e5b16",
                                "fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
                                "fp64": "float64"}.get(name, name))
    for a in ATTRS:
        assert getattr(ours, a, None) == getattr(real, a, None), a
    for p in PREDICATES:
        assert getattr(ours, p)() == getattr(real, p)(), p
    assert ours.triton_name == real.name and ours.scalar is ours
    ptr = tl.pointer_type(ours)
    assert ptr.element_ty is ours and ptr.is_ptr() and not ptr.is_fp16()


def test_dtype_predicates_in_a_kernel_are_constexprs():
    @triton.jit
    def pick(X, Z, N: tl.constexpr):
        off = tl.arange(0, N)
        if X.dtype.element_ty.is_fp16():
            tl.store(Z + off, 16)
        elif X.dtype.element_ty.fp_mantissa_width == 23:
            tl.store(Z + off, 32)
        else:
            tl.store(Z + off, X.dtype.element_ty.primitive_bitwidth)

    z = torch.zeros(4, dtype=torch.int32)
    for dt, want in ((torch.float16, 16), (torch.float32, 32), (torch.int8, 8)):
        pick[(1,)](torch.zeros(4, dtype=dt), z, N=4)
        assert z.tolist() == [want] * 4


def test_unsupported_fp8_formats_exist_on_the_host_and_are_refused_in_kernels():
    assert tl.float8e4b15.fp_mantissa_width == 3 and tl.float8e5b16.exponent_bias == 16

    @triton.jit
    def conv(X, Z):
        tl.store(Z, tl.load(X).to(tl.float8e4b15).to(tl.float32))

    with pytest.raises(CompilationError, match="fp8e4b15 is not supported in a kernel"):
        conv[(1,)](torch.zeros(1), torch.zeros(1))


@triton.jit
def _shift_right(X, Z, N: tl.constexpr):
    off = tl.arange(0, N)
    tl.store(Z + off, (tl.load(X + off) >> 1).to(tl.int64))


@pytest.mark.parametrize("reinterpret", [triton.reinterpret, pytest.importorskip("triton").reinterpret],
                         ids=["front door", "Triton's"])
def test_reinterpreted_tensor_is_a_tensor_of_the_stated_dtype(reinterpret):
    x = torch.tensor([-2, -4, 6, 8], dtype=torch.int32)
    z = torch.zeros(4, dtype=torch.int64)
    dt = tl.uint32 if reinterpret is triton.reinterpret else real_tl.uint32
    _shift_right[(1,)](reinterpret(x, dt), z, N=4)   # a logical shift: the elements are uint32
    assert z.tolist() == [2 ** 31 - 1, 2 ** 31 - 2, 3, 4]
    _shift_right[(1,)](x, z, N=4)                     # the same launch with the int32 tensor
    assert z.tolist() == [-1, -2, 3, 4]
    with pytest.raises(triton.TritonError, match="another element size"):
        _shift_right[(1,)](reinterpret(x, tl.uint8), z, N=4)
