"""Tile IR: printer, structural hash, verifier, op registry coverage, passes."""
import pytest
import torch

from compiler import dtypes as D
from compiler import kernel, language as tl
from compiler.errors import IRError
from compiler.frontend import ArgSpec, build_function
from compiler.ir import OPS, Block, Function, Op, Param, TileType, Value, print_function, structural_hash, verify
from compiler.passes import optimize
from targets.cfamily.dialect import CDialect
from targets.cfamily.lowering import CLowering

pytestmark = pytest.mark.no_toolchain


def axpy(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _specs(block=128):
    f32p = D.pointer_type(D.float32)
    return [ArgSpec("x_ptr", "tensor", dtype=f32p), ArgSpec("y_ptr", "tensor", dtype=f32p),
            ArgSpec("a", "scalar", dtype=D.float32), ArgSpec("n", "scalar", dtype=D.int32),
            ArgSpec("BLOCK", "constexpr", value=block)]


def test_printer_is_stable_and_readable():
    text1 = print_function(build_function(axpy, "axpy", _specs(), {}))
    text2 = print_function(build_function(axpy, "axpy", _specs(), {}))
    assert text1 == text2
    assert text1.startswith("kernel axpy(%x_ptr: *fp32, %y_ptr: *fp32, %a: fp32, %n: int32)")
    assert "arange {end=128, start=0} : int32[128]" in text1
    assert "load" in text1 and "store" in text1


def test_hash_ignores_locations_but_not_specialisation():
    f1 = build_function(axpy, "axpy", _specs(), {})
    f2 = build_function(axpy, "axpy", _specs(), {})
    for op in f2.walk():   # same IR, other file and lines
        op.loc = None
    assert structural_hash(f1) == structural_hash(f2)
    assert structural_hash(f1) != structural_hash(build_function(axpy, "axpy", _specs(256), {}))
    assert structural_hash(f1) != structural_hash(build_function(axpy, "axpy", _specs(), {"numerics": "strict"}))


def test_verifier_accepts_frontend_output_and_rejects_bad_ir():
    fn = build_function(axpy, "axpy", _specs(), {})
    verify(fn)
    # a result whose type disagrees with its op's rule
    bad = Op("add", [fn.params[2].value, fn.params[2].value], [TileType(D.int32)])
    fn.body.ops.insert(0, bad)
    with pytest.raises(IRError, match="result types"):
        verify(fn)


def test_verifier_rejects_use_before_definition():
    v = Value(TileType(D.float32))
    body = Block()
    body.append(Op("neg", [v], [TileType(D.float32)]))
    with pytest.raises(IRError, match="before it is defined"):
        verify(Function("f", [], body))


def test_verifier_checks_loop_yield_types():
    p = Value(TileType(D.int32), name_hint="n")
    body = Block([Value(TileType(D.int32)), Value(TileType(D.float32))])
    body.append(Op("yield", [body.args[0]], []))   # yields an int32 for an fp32 carried value
    outer = Block()
    c0 = outer.append(Op("const", [], [TileType(D.float32)], {"value": 0.0, "type": TileType(D.float32)}))
    outer.append(Op("for", [p, p, p, c0.result], [TileType(D.float32)], blocks=[body]))
    with pytest.raises(IRError, match="yielded types"):
        verify(Function("f", [Param("n", TileType(D.int32), p)], outer))


def test_every_op_is_covered_by_the_c_lowering():
    """A renderer must cover or explicitly reject every op in the registry."""
    dialect = CDialect()
    for name, opdef in OPS.items():
        handled = hasattr(CLowering, f"op_{name}") or opdef.kind in ("elementwise", "view", "source")
        assert handled, f"op {name} is not covered by the C lowering"
        if opdef.kind == "elementwise":
            ts = [TileType(D.float32)] * {"where": 3, "fma": 3}.get(name, 2)
            if name == "where":
                ts[0] = TileType(D.int1)
            if name in ("neg", "not", "abs", "cast") or name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt",
                                                                 "sigmoid", "sin", "cos", "floor", "ceil"):
                ts = [TileType(D.int32 if name == "not" else D.float32)]
            if name in ("and", "or", "xor", "shl", "shr", "floordiv"):
                ts = [TileType(D.int32)] * 2
            attrs = {"to": D.float16} if name == "cast" else {}
            op = Op(name, [Value(t) for t in ts], [TileType(D.int1 if name in ("lt", "le", "gt", "ge", "eq", "ne")
                                                            else (D.float16 if name == "cast" else ts[-1].dtype))], attrs)
            assert dialect.elementwise(op, ["a", "b", "c"][:len(ts)])


@pytest.mark.compile
def test_passes_fold_cse_and_accumulate_dot():
    @kernel
    def mm(a_ptr, c_ptr, K, B: tl.constexpr):
        r = tl.arange(0, B)
        acc = tl.zeros((B, B), dtype=tl.float32)
        for k in range(0, K, B):
            x = tl.load(a_ptr + r[:, None] * B + r[None, :])
            acc += tl.dot(x, x)
        tl.store(c_ptr + r[:, None] * B + r[None, :], acc + 0.0 * 2.0)

    a = torch.randn(8, 8)
    c = torch.empty(8, 8)
    ck = mm[(1,)](a, c, 16, B=8)
    torch.testing.assert_close(c, 2 * (a @ a), rtol=1e-5, atol=1e-5)
    body = ck.ir[ck.ir.index(" for "):]
    body = body[:body.index("\n  }")]
    assert not [ln for ln in body.splitlines() if " = add " in ln and ": fp32[" in ln]   # acc += ... folded
    dot_lines = [ln for ln in body.splitlines() if " dot " in ln]
    carried = body.split("iter_args(")[1].split(" = ")[0]
    assert len(dot_lines) == 1 and dot_lines[0].rstrip().split(" : ")[0].endswith(carried)
    assert not [ln for ln in ck.ir.splitlines() if " = mul " in ln and ": fp32" in ln]   # 0.0 * 2.0 folded


def test_optimize_removes_dead_code():
    def dead(x_ptr, n):
        y = tl.exp(tl.load(x_ptr + tl.arange(0, 16)))  # never stored
        tl.store(x_ptr + tl.arange(0, 16), 1.0)

    fn = build_function(dead, "dead", [ArgSpec("x_ptr", "tensor", dtype=D.pointer_type(D.float32)),
                                       ArgSpec("n", "scalar", dtype=D.int32)], {})
    optimize(fn)
    names = [op.name for op in fn.walk()]
    assert "exp" not in names and "store" in names
