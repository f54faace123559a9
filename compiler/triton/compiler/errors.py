"""`triton.compiler.errors`: CompilationError is tilejit's (every kernel compile error is one)."""
from ...errors import CompilationError, TritonError  # noqa: F401

CompileTimeAssertionFailure = UnsupportedLanguageConstruct = CompilationError
