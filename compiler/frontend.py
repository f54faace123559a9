"""Frontend: a kernel's Python AST -> Tile IR.

Constexprs are plain Python values and are folded while the AST is walked; tensor values are
`Tile`s over IR values. `range` loops become IR loops with carried values, `tl.static_range`
loops are unrolled, `if` needs a constexpr condition, and calls to other `@kernel` functions are
inlined. Every failure is a CompilationError at the user's file and line.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from dataclasses import dataclass
from functools import lru_cache

from .captured import record as record_capture
from . import dtypes as D
from . import language as lang
from .builtins_common import python_function
from .errors import CompilationError
from .faults import debug_enabled
from .ir import Block, Function, Loc, Param, TileType, Value
from .frontend_flow import FlowMixin, _Return
from .frontend_names import (TILE_METHODS, BoundMethod, did_you_mean, map_global, missing_builtin, other_attr,
                             tile_attr, unsupported)
from .semantic import PY_BINARY, Builder, SemanticError, Tile, fold_python_binary
from .source import kept_or_read

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "shl",
           ast.RShift: "shr", ast.Pow: "pow"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne",
           ast.Is: "is", ast.IsNot: "is not"}
# Python builtins a kernel may call on constexprs.
_PY_BUILTINS = {name: getattr(builtins, name) for name in (
    "range", "len", "min", "max", "float", "int", "bool", "abs", "isinstance", "print", "tuple",
    "list", "str", "round", "enumerate", "zip", "getattr", "hasattr", "type")}


@dataclass
class ArgSpec:
    """One kernel parameter as the specialisation sees it."""

    name: str
    kind: str                 # "constexpr" | "tensor" (a pointer) | "scalar"
    value: object = None      # the constexpr's value
    dtype: D.dtype | None = None
    hints: dict | None = None


def parse(fn, owner=None) -> tuple[ast.FunctionDef, str, int, int]:
    """(the function's AST, its file, its first line, the indentation the dedent removed); the
    source is the one kept on `owner` (its kernel object), else the function's file
    (compiler/source.py)."""
    return _parse(fn, getattr(owner, "kept_source", None))


@lru_cache(maxsize=None)
def _parse(fn, kept) -> tuple[ast.FunctionDef, str, int, int]:
    src = kept if kept is not None else kept_or_read(None, fn)
    lines, start = list(src.lines), src.first_line
    text = textwrap.dedent("".join(lines))
    shift = len(lines[0]) - len(lines[0].lstrip()) - (len(text) - len(text.lstrip(" \t")))
    tree = ast.parse(text)
    fdef = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fdef is None:
        raise CompilationError(f"the source kept for {fn.__qualname__} defines no function", filename=src.filename,
                               lineno=start)
    if isinstance(fdef, ast.AsyncFunctionDef):
        raise CompilationError("a kernel cannot be async", filename=src.filename, lineno=start)
    return fdef, src.filename, start, shift


def constexpr_params(fn, owner=None) -> set[str]:
    """Parameter names annotated `tl.constexpr` (ours or Triton's, or the string form)."""
    fdef = parse(fn, owner)[0]
    return {a.arg for a in fdef.args.args
            if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")}


class FunctionVisitor(FlowMixin, ast.NodeVisitor):
    """Walks one function body (a kernel, or a helper being inlined) with a shared builder."""

    def __init__(self, fn, builder: Builder, kernel_name: str, depth: int = 0, owner=None):
        self.fn = fn
        self.fdef, self.filename, self.first_line, self.col_shift = parse(fn, owner)
        if owner is not None and "kept_source" in vars(owner):
            # a replaced source recompiles this kernel and every kernel that inlines it
            record_capture(getattr(builder, "captured", None), vars(owner), "kept_source", owner.kept_source)
        self.builder = builder
        self.kernel_name = kernel_name
        self.depth = depth
        self.scope: dict[str, object] = {}
        self.globals = dict(fn.__globals__)
        self._sources = {}   # name -> the closure cell it was read from (else fn.__globals__)
        self._fn_globals = fn.__globals__
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    self.globals[name] = cell.cell_contents
                    self._sources[name] = cell
                except ValueError:
                    pass
        self.loop_depth = 0     # run-time loops around the statement being walked
        self.static_depth = 0   # tl.static_range loops around it
        self.gone: dict[str, str] = {}   # names no longer defined, and why

    # -- errors and locations ---------------------------------------------------------------
    def _lineno(self, node) -> int:
        return getattr(node, "lineno", 1) + self.first_line - 1

    def loc(self, node) -> Loc:
        """Where `node` is in the user's file (line and column as in the file, not the dedented text)."""
        return Loc(self.filename, self._lineno(node), getattr(node, "col_offset", 0) + self.col_shift,
                   self.kernel_name)

    def error(self, node, message: str) -> CompilationError:
        return CompilationError.at(self.loc(node), message)

    def visit(self, node):
        if isinstance(node, (ast.stmt, ast.expr)):
            self.builder.loc = self.loc(node)
        try:
            return super().visit(node)
        except (CompilationError, _Return):
            raise
        except SemanticError as e:
            raise self.error(node, str(e)) from None
        except RecursionError:
            raise self.error(node, "helper calls nest too deeply (recursion is not supported)") from None
        except (TypeError, ValueError, ZeroDivisionError, IndexError, KeyError, AttributeError,
                NameError, OverflowError) as e:
            if debug_enabled():   # the compiler's own traceback, as it is
                raise
            raise self.error(node, f"{type(e).__name__}: {e}") from None

    def generic_visit(self, node):
        raise self.error(node, unsupported(node))

    # -- entry points ---------------------------------------------------------------------
    def run_body(self):
        body = self.fdef.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # docstring
        try:
            self.visit_stmts(body)
        except _Return as r:
            return r.value
        return None

    # -- statements -------------------------------------------------------------------------
    def visit_Expr(self, node):
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self._assign(target, value)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self._assign(node.target, self.visit(node.value))

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "augmented assignment only to a plain name")
        cur = self._lookup(node.target.id, node)
        self.scope[node.target.id] = self._binary(_BINOPS[type(node.op)], cur, self.visit(node.value))

    def _assign(self, target, value):
        if isinstance(target, ast.Name):
            if isinstance(value, lang.constexpr):
                value = value.value
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise self.error(target, "cannot unpack this value into "
                                         f"{len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self._assign(t, v)
        else:
            raise self.error(target, "assignment target must be a name or a tuple of names "
                                     "(use tl.store to write memory)")

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, Tile):   # a run-time check, as Triton: tl.device_assert
            from .builtins_memory import device_assert  # noqa: PLC0415
            msg = self.visit(node.msg) if node.msg is not None else f"assert {ast.unparse(node.test)}"
            device_assert(self.builder, "device_assert", {"cond": cond, "msg": str(msg), "mask": None})
            return
        if not cond:
            msg = self.visit(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(node, str(msg))

    # -- expressions ------------------------------------------------------------------------
    def visit_Constant(self, node):
        return node.value

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                parts.append(format(self.visit(v.value)))
        return "".join(parts)

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Name(self, node):
        return self._lookup(node.id, node)

    def _lookup(self, name, node):
        if name in self.scope:
            return self.scope[name]
        if name in self.globals:
            value = self.globals[name]
            # what the kernel read is folded into its IR: the warm path checks it still holds
            record_capture(getattr(self.builder, "captured", None), self._sources.get(name, self._fn_globals),
                            name, value)
            return map_global(value)
        if name in _PY_BUILTINS:
            return _PY_BUILTINS[name]
        why = self.gone.get(name)
        hint = f" here ({why})" if why else did_you_mean(name, list(self.scope) + list(self.globals))
        raise self.error(node, f"name '{name}' is not defined{hint}")

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        if isinstance(base, Tile):
            return tile_attr(self.builder, base, node.attr)
        return other_attr(self.builder, base, node.attr)

    def visit_Subscript(self, node):
        base = self.visit(node.value)
        if not isinstance(base, Tile):
            return base[self.visit(node.slice)]
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        t = base
        axis = 0
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                t = self.builder.expand_dims(t, axis)
                axis += 1
            elif isinstance(it, ast.Slice) and all(p is None or self._is_none(p)
                                                   for p in (it.lower, it.upper, it.step)):
                axis += 1   # `:`, also spelled `None:None`
            else:
                raise self.error(it, "unsupported tensor index: a tensor takes only ':' and None (e.g. x[:, None]); "
                                     "use pointer arithmetic and tl.load to gather elements, or tl.gather")
        if axis != len(t.shape):
            raise self.error(node, f"index uses {axis} axes but the tensor has {len(t.shape)}")
        return t

    def _is_none(self, node) -> bool:
        v = self.visit(node)
        return v is None or (isinstance(v, lang.constexpr) and v.value is None)

    def visit_BinOp(self, node):
        return self._binary(_BINOPS.get(type(node.op), type(node.op).__name__),
                            self.visit(node.left), self.visit(node.right))

    def _binary(self, name, a, b):
        if isinstance(a, lang.constexpr):
            a = a.value
        if isinstance(b, lang.constexpr):
            b = b.value
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            if name not in PY_BINARY:
                raise SemanticError(f"unsupported operator {name}")
            return fold_python_binary(name, a, b)
        if name == "pow":
            return self._power(a, b)
        if name not in PY_BINARY:
            raise SemanticError(f"unsupported operator {name}")
        return self.builder.binary(name, a, b)

    def _power(self, a, b):
        """`x ** n` for a constexpr int 0 <= n <= 16: repeated multiplication, left to right (exact as
        written); any other exponent: tl.pow (floats)."""
        if isinstance(a, Tile) and isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 16:
            if b == 0:
                return self.builder.broadcast_to(self.builder.const(1, a.dtype), a.shape)
            r = a
            for _ in range(b - 1):
                r = self.builder.binary("mul", r, a)
            return r
        from .builtins_tiles import HANDLERS  # noqa: PLC0415
        return HANDLERS["pow"](self.builder, "pow", {"x": a, "y": b})

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        if not isinstance(v, Tile):
            return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Not: lambda x: not x,
                    ast.Invert: lambda x: ~x}[type(node.op)](v)
        if isinstance(node.op, ast.USub):
            return self.builder.unary("neg", v)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert):
            return self.builder.unary("not", v)
        if isinstance(node.op, ast.Not):
            if v.dtype is not D.int1:
                v = self.builder.binary("ne", v, 0)
            return self.builder.unary("not", v)
        raise self.error(node, "unsupported unary operator")

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            vals = [self.visit(node.left)] + [self.visit(c) for c in node.comparators]
            if any(isinstance(v, Tile) for v in vals):
                raise self.error(node, "chained comparisons of tensors are not supported; combine with '&'")
            return all(PY_BINARY[_CMPOPS[type(o)]](a, b) for o, a, b in zip(node.ops, vals, vals[1:]))
        name = _CMPOPS.get(type(node.ops[0]))
        if name is None:
            raise self.error(node, f"unsupported comparison {type(node.ops[0]).__name__}")
        a, b = self.visit(node.left), self.visit(node.comparators[0])
        if name in ("is", "is not"):
            if isinstance(a, Tile) or isinstance(b, Tile):
                if a is None or b is None:   # a run-time value is never None (None args are constexprs)
                    return name == "is not"
                raise self.error(node, "'is' applies to constexprs only")
            return (a is b) if name == "is" else (a is not b)
        return self._binary(name, a, b)

    def visit_Call(self, node):
        func = self.visit(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.visit(a.value))
            else:
                args.append(self.visit(a))
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        args = [a.value if isinstance(a, lang.constexpr) else a for a in args]
        kwargs = {k: (v.value if isinstance(v, lang.constexpr) else v) for k, v in kwargs.items()}
        if isinstance(func, BoundMethod):
            return func.call(self, node, args, kwargs)
        if getattr(func, "__tilejit_method__", False):   # a method of a block pointer / descriptor
            return func.fn(self.builder, *args, **kwargs)
        if getattr(func, "__tilejit_unsupported__", None):   # a Triton name with no builtin yet
            raise self.error(node, func.__tilejit_unsupported__)
        name = getattr(func, "__tilejit_builtin__", None)
        if name is not None:
            from .builtins_impl import call_builtin  # noqa: PLC0415
            return call_builtin(self, node, name, args, kwargs)
        if func is lang.constexpr:
            return args[0] if args else None
        helper = python_function(func)
        if helper is not None:
            return self._inline(node, helper, args, kwargs, owner=func)
        if func is D.pointer_type or getattr(func, "__name__", "") == "pointer_type" and isinstance(func, type):
            return D.pointer_type(*(map_global(a) for a in args))   # tl.pointer_type(tl.float16): a dtype
        if isinstance(func, type) and issubclass(func, D.dtype) or isinstance(func, D.dtype):
            raise self.error(node, "dtypes are not callable; use x.to(dtype)")
        if func in _PY_BUILTINS.values() or func is range:
            if any(isinstance(a, Tile) for a in list(args) + list(kwargs.values())):
                if func in (min, max) and len(args) == 2 and not kwargs:
                    return self.builder.binary("min" if func is min else "max", *args)
                if func in (isinstance, hasattr) and len(args) == 2 and not kwargs:
                    return _tile_isinstance(args[0], args[1]) if func is isinstance else _tile_hasattr(args[1])
                raise self.error(node, f"Python's {func.__name__}() cannot take tensor values; "
                                       "use the tl.* equivalent")
            return func(*args, **kwargs)
        if isinstance(func, types.BuiltinFunctionType) and getattr(func, "__module__", "") == "math":
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if (getattr(func, "__module__", "") or "").startswith("triton") and missing_builtin("tl.", name):
            raise self.error(node, missing_builtin("tl.", name))
        raise self.error(node, f"call to '{ast.unparse(node.func)}' is not supported in a kernel: only tl.* "
                               "builtins, @kernel helper functions and constexpr Python builtins may be called")

    def _inline(self, node, fn, args, kwargs, owner=None):
        if self.depth > 32:
            raise self.error(node, "helper calls nest too deeply (recursion is not supported)")
        sub = FunctionVisitor(fn, self.builder, self.kernel_name, self.depth + 1, owner)
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(node, f"calling helper '{fn.__name__}': {e}") from None
        bound.apply_defaults()
        sub.scope.update(bound.arguments)
        saved_loc = self.builder.loc
        result = sub.run_body()
        self.builder.loc = saved_loc
        return result


def _tile_isinstance(t: Tile, cls) -> bool:
    """isinstance(tensor, X) at compile time: true for tl.tensor (ours or Triton's)."""
    classes = cls if isinstance(cls, tuple) else (cls,)
    return any(c is lang.tensor or getattr(c, "__name__", "") == "tensor" for c in classes)


def _tile_hasattr(name) -> bool:
    return name in ("dtype", "shape", "type", "T") or name in TILE_METHODS


def build_function(fn, kernel_name: str, argspecs: list[ArgSpec], specialization: dict,
                   captured: dict | None = None, owner=None) -> Function:
    """Runs the frontend over `fn` (the function of kernel object `owner`) for one specialisation
    and returns the kernel's IR. `captured`, when given, receives the globals the kernel (and the
    helpers it inlines) read (compiler.captured.record)."""
    body = Block()
    builder = Builder(body)
    builder.captured = captured
    visitor = FunctionVisitor(fn, builder, kernel_name, owner=owner)
    params = []
    for spec in argspecs:
        if spec.kind == "constexpr":
            visitor.scope[spec.name] = map_global(spec.value)   # e.g. a triton.language dtype
            continue
        ty = TileType(spec.dtype)
        v = Value(ty, name_hint=spec.name)
        params.append(Param(spec.name, ty, v, dict(spec.hints or {})))
        visitor.scope[spec.name] = Tile(v)
    ret = visitor.run_body()
    if ret is not None:
        raise visitor.error(visitor.fdef, "a kernel cannot return a value; write results with tl.store")
    return Function(kernel_name, params, body, dict(specialization))
