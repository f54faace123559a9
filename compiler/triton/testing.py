"""`triton.testing`: timing helpers and the benchmark decorators. `perf_report` does nothing at
import; the benchmark runs (and prints its table) only when `.run()` is called."""
from __future__ import annotations

import statistics
import time


def _sync():
    import torch  # noqa: PLC0415
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean", **_ignored):
    """Milliseconds per call of `fn()`: `warmup` ms of calls, then about `rep` ms of timed calls
    (each synchronised on a CUDA device). `quantiles` gives a list, else `return_mode` of the samples."""
    fn()
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    once = max(time.perf_counter() - t0, 1e-7) * 1e3
    for _ in range(max(0, int(warmup / once))):
        fn()
    samples = []
    for _ in range(max(1, int(rep / once))):
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        t0 = time.perf_counter()
        fn()
        _sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    if quantiles is not None:
        s = sorted(samples)
        out = [s[min(len(s) - 1, int(q * len(s)))] for q in quantiles]
        return out[0] if len(out) == 1 else out
    return {"mean": statistics.fmean, "median": statistics.median, "min": min, "max": max,
            "all": list}[return_mode](samples)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    import torch  # noqa: PLC0415
    torch.testing.assert_close(torch.as_tensor(x), torch.as_tensor(y), atol=atol, rtol=rtol, msg=err_msg or None,
                               check_dtype=False)


class Benchmark:
    """A benchmark's description, as Triton's `testing.Benchmark`."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args=None, xlabel="",
                 ylabel="", x_log=False, y_log=False, styles=None, **_ignored):
        self.x_names, self.x_vals, self.line_arg = list(x_names), list(x_vals), line_arg
        self.line_vals, self.line_names, self.plot_name = list(line_vals), list(line_names), plot_name
        self.args = dict(args or {})
        self.xlabel, self.ylabel, self.x_log, self.y_log, self.styles = xlabel, ylabel, x_log, y_log, styles


class Mark:
    def __init__(self, fn, benchmarks):
        self.fn, self.benchmarks = fn, benchmarks

    def run(self, show_plots=False, print_data=True, save_path="", return_df=False, **kwargs):
        """Runs every benchmark point and prints a plain table (no plots)."""
        rows = []
        for bench in (self.benchmarks if isinstance(self.benchmarks, list) else [self.benchmarks]):
            for x in bench.x_vals:
                xs = dict(zip(bench.x_names, x if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)))
                vals = [self.fn(**xs, **{bench.line_arg: lv}, **bench.args, **kwargs) for lv in bench.line_vals]
                rows.append((xs, vals))
                if print_data:
                    print(bench.plot_name, xs, dict(zip(bench.line_names, vals)))
        return rows if return_df else None


def perf_report(benchmarks):
    return lambda fn: Mark(fn, benchmarks)
