"""Where a kernel's Python source comes from.

The frontend compiles a kernel from its source text, in this order:
1. a source kept on the kernel object (`kept_source`): one given as text (Triton's
   `JITFunction._unsafe_update_src`, `keep_source`), or recovered when the function was decorated;
2. `inspect.getsourcelines`: the function's file, or the text a code generator registered in
   `linecache` under the code's file name (as Inductor and IPython do);
3. for a function made by `exec()` / `compile()` of a string that is in no file and no linecache
   entry, the text is recovered when `@kernel` / `triton.jit` wraps it: among the string locals
   of the frames that are running that `exec` (the decorator runs inside it, and Triton's own
   `patch_kernel`, like most templating code, holds the text in a local), and, once the Triton
   front door is imported, among the texts recently compiled under pseudo file names (`<string>`,
   `<generated>`), which it keeps from Python's "compile" audit event (`watch_exec`). A candidate
   is taken only if compiling it again gives the very same code object (bytecode, constants,
   names), so a wrong text is never used.

A source given as text is registered in `linecache` under a name of its own (the code's file
name and a hash of the text), so errors show its lines. The cache key is the IR's hash, not the
text or its origin: the same text exec'd twice, or a replaced source that gives the same IR,
reuses the cached binary.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
import linecache
import sys
import types

from .errors import CompilationError


@dataclasses.dataclass(frozen=True, eq=False)
class Source:
    """A function's source lines (from its first decorator or `def`), the file name errors show for
    them (a linecache key), and the line number of the first line in that file."""

    lines: tuple
    filename: str
    first_line: int


def kept_or_read(owner, fn) -> Source:
    """The source of `fn` (the Python function of kernel object `owner`, which may be None)."""
    kept = getattr(owner, "kept_source", None)
    if kept is not None:
        return kept
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CompilationError(
            f"cannot read the source of {fn.__qualname__}: {e}. A kernel made by exec() or compile() of a string "
            "needs its text: decorate it inside the exec (its text is then found in the caller's locals), register "
            "the text in linecache under the code's file name, or call compiler.keep_source(kernel, text)") from None
    return Source(tuple(lines), inspect.getsourcefile(fn) or fn.__code__.co_filename, start)


def from_text(fn, text: str, origin: str) -> Source:
    """`text` (a whole function, decorators optional) as the source of `fn`, registered in linecache
    under `origin#<hash>`."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    name = f"{origin}#{digest}"
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[name] = (len(text), None, lines, name)   # mtime None: never checked against a file
    return Source(tuple(lines), name, 1)


def needs_recovery(fn) -> bool:
    """Whether `fn` has no source inspect can find (made by exec/compile of a string)."""
    filename = fn.__code__.co_filename
    if filename in linecache.cache:
        return False
    if not (filename.startswith("<") and filename.endswith(">")):
        return False   # a file (read lazily by the frontend; a missing one is reported then)
    try:
        inspect.getsourcelines(fn)
        return False
    except (OSError, TypeError):
        return True


def recover(fn, frame: types.FrameType | None, depth: int = 10) -> Source | None:
    """The text `fn` was compiled from, found among the string locals of `frame` and its callers
    or among the texts `watch_exec` kept, and verified by compiling it again; None otherwise."""
    code = fn.__code__
    marker = f"def {fn.__name__}"
    seen: set[int] = set()
    for text in _candidates(frame, depth, code.co_filename):
        if isinstance(text, str) and marker in text and id(text) not in seen:
            seen.add(id(text))
            if _compiled_from(code, text) is not None:
                block = inspect.getblock(text.splitlines(True)[code.co_firstlineno - 1:])
                return from_text(fn, "".join(block), code.co_filename)
    return None


def _candidates(frame, depth: int, filename: str):
    while frame is not None and depth > 0:
        try:
            yield from list(frame.f_locals.values())
        except Exception:  # noqa: BLE001 - an odd frame: skip it
            pass
        frame, depth = frame.f_back, depth - 1
    yield from (text for name, text in reversed(list(_COMPILED)) if name == filename)


# (file name, text) of the latest strings compiled under pseudo file names, while watched
_COMPILED: collections.deque = collections.deque(maxlen=256)
_watching = [False]
_VERIFYING = "<tilejit: source check>"   # recover's own compiles, which the watch skips


def watch_exec() -> None:
    """Keeps the texts that exec()/compile() compile under pseudo file names (`<string>`), from
    Python's "compile" audit event, for `recover`. Installed by the Triton front door (code that
    generates Triton kernels as text goes through it); the hook cannot be removed, and costs a
    comparison per audit event."""
    if not _watching[0]:
        _watching[0] = True
        sys.addaudithook(_on_audit)


def _on_audit(event: str, args) -> None:
    if event != "compile":
        return
    try:
        text, filename = args
        if isinstance(filename, str) and filename[:1] == "<" and filename != _VERIFYING \
                and filename not in linecache.cache:
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            if isinstance(text, str) and "def " in text:
                _COMPILED.append((filename, text))
    except Exception:  # noqa: BLE001 - an audit hook must never fail the code it watches
        pass


def caller_frame(skip: int) -> types.FrameType | None:
    """The frame `skip` levels above the caller of this function."""
    try:
        return sys._getframe(skip + 2)
    except ValueError:
        return None


def _compiled_from(code: types.CodeType, text: str):
    """The code object in `text` that is the very function `code` came from, or None."""
    try:
        top = compile(text, _VERIFYING, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    stack = [top]
    while stack:
        c = stack.pop()
        if c.co_name == code.co_name and c.co_firstlineno == code.co_firstlineno and _same_code(c, code):
            return c
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return None


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars) != (b.co_code, b.co_names, b.co_varnames, b.co_freevars):
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            if not (isinstance(x, float) and x != x and y != y):
                return False
    return True


def keep_source(kernel_obj, text: str) -> None:
    """Compile `kernel_obj` (a @kernel or triton.jit object) from `text` from now on: the whole
    function, decorators optional. Its specialisations, and the kernels that inline it, recompile
    at their next launch; the cache is keyed by the IR, so a text that gives the same IR reuses its
    binaries."""
    fn = kernel_obj.fn
    kernel_obj.kept_source = from_text(fn, text, _origin(fn))
    kernel_obj.source_replaced()


def _origin(fn) -> str:
    filename = fn.__code__.co_filename
    return filename if filename.startswith("<") else f"{filename} (replaced source of {fn.__qualname__})"
