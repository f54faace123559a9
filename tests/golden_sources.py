"""Golden rendered sources: what the example kernels and each library op's default config render
to on the cpu, kunlun and gpu targets (compiler.render_only: no toolchain), kept under
tests/golden/<target>/ so that a change to a lowering shows as a diff of the generated code.
tests/test_golden.py compares them; after a deliberate change, rewrite them with

    python tests/golden_sources.py

and review the diff (`git diff --stat tests/golden`) before committing it.
"""
from __future__ import annotations

import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
# target -> (its directory under tests/golden, the extension of its sources)
TARGETS = {"cpu": ("cpu", "cpp"), "kunlun:xpu3": ("kunlun-xpu3", "xpu"), "gpu:sm_90": ("gpu-sm_90", "py")}
POLICY = "fast"


def _examples() -> dict:
    """The example kernels (examples/example_kernels.py) through their wrappers, on fixed shapes."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from examples import example_kernels as E  # noqa: PLC0415
    x, w = torch.empty(8, 96), torch.empty(96)
    return {
        "add": lambda: E.add(x, x),
        "softmax": lambda: E.softmax(x),
        "layernorm": lambda: E.layernorm(x, w, w),
        "matmul": lambda: E.matmul(torch.empty(40, 24), torch.empty(24, 56)),
        "row_sum_max": lambda: E.row_sum_max(x),
        "gelu": lambda: E.gelu(x),
        "silu": lambda: E.silu(x),
        "embedding": lambda: E.embedding(torch.zeros(5, dtype=torch.int64), x),
        "transpose": lambda: E.transpose(x),
    }


def _ops() -> dict:
    """Each library op, called by its spec's probe with the default config of its first quick shape."""
    from compiler.opspec import library_ops  # noqa: PLC0415

    def call(spec):
        def run(target):
            shape = (spec.quick_shapes or spec.tune_shapes)[0]
            spec.probe(spec.default_config(target.caps, spec.dims_of(shape)), shape)
        return run
    return {name: call(spec) for name, spec in sorted(library_ops().items())}


def cases() -> list[str]:
    return [f"examples.{n}" for n in _examples()] + [f"ops.{n}" for n in _ops()]


def render(case: str, target: str) -> dict[str, str]:
    """file name -> source of every kernel `case` launches on `target`, in launch order."""
    import compiler  # noqa: PLC0415
    group, name = case.split(".", 1)
    tgt = compiler.get_target(target)
    with compiler.use_target(target), compiler.numerics(POLICY), compiler.render_only() as seen:
        if group == "examples":
            _examples()[name]()
        else:
            _ops()[name](tgt)
    ext = TARGETS[target][1]
    return {f"{case}.{i}.{r.name}.{ext}": r.source for i, r in enumerate(seen)}


def stored(case: str, target: str) -> dict[str, str]:
    d = GOLDEN / TARGETS[target][0]
    return {p.name: p.read_text() for p in sorted(d.glob(f"{case}.*"))}


def main() -> None:
    known = set()
    for target, (dirname, _) in TARGETS.items():
        d = GOLDEN / dirname
        d.mkdir(parents=True, exist_ok=True)
        for case in cases():
            for fname, source in render(case, target).items():
                (d / fname).write_text(source)
                known.add(d / fname)
    stale = [p for p in GOLDEN.rglob("*") if p.is_file() and p not in known]
    for p in stale:
        p.unlink()
    print(f"{len(known)} golden sources written under {GOLDEN.relative_to(REPO)}/"
          + (f", {len(stale)} stale ones removed" if stale else ""))


if __name__ == "__main__":
    main()
