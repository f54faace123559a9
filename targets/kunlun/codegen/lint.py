"""The dialect lint: rules a generated `.xpu` source must keep for XTDK and the chip, each with
where the rule comes from. No Kunlun compiler runs where this project is tested, so these are
checked on the text (`lint(source)`; the tests run it over every source they generate); the
fence rules are checked at run time by the emulation instead (plan/fences.py).

`python -m targets.kunlun.codegen FILE.xpu ...` prints the violations of files.
"""
from __future__ import annotations

import dataclasses
import re
import sys


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    says: str
    source: str   # where the rule comes from (docs/kunlun.md, Sources)


RULES = {r.name: r for r in (
    Rule("gm-deref", "global memory is reached only through DMA: no GM pointer is dereferenced or indexed",
         "Kunlunxin XPU C/C++ guide, memory spaces: compute reads only local memory"),
    Rule("dma-direction", "GM2LM copies GM to LM and LM2GM LM to GM, never the other way round",
         "Kunlunxin XPU C/C++ guide, GM2LM/LM2GM"),
    Rule("host-math", "no C99 libm names (expf, fmaf, nearbyintf, ...) and no <math.h> macros (INFINITY, NAN): "
         "device math is the overloaded names (exp, sqrt, ...) or clang's __builtin_*f",
         "the guide's device math list; FlagTree third_party/xpu/device/trigonometric.xpu (exp, sqrt, fabs, "
         "__builtin_fmaf, __builtin_rintf); device builds pass -fno-builtin (Paddle cmake/xpu_kp.cmake)"),
    Rule("openmp", "no #pragma omp in device code", "public builds are -Werror with -Wall (unknown pragmas warn)"),
    Rule("wide-types", "no 64-bit index types (int64_t, long, size_t) and no double",
         "the guide: 32-bit registers and pointers; no fp64 on xpu3 (FlagGems _kunlunxin)"),
    Rule("stride-loop", "programs are walked by a stride loop over cluster_id() * core_num() + core_id()",
         "Paddle phi/kernels/primitive *xpu2*.h, FastDeploy xpu_ops kernels"),
    Rule("launch-status", "the host wrapper returns the status of `kernel<<<clusters, cores, stream>>>` "
         "(built with -fxpu-launch-return)", "FastDeploy src/plugin CMakeLists.txt"),
    Rule("lm-accounted", "every __local__ buffer is followed by TJ_LM_USE (the emulation's LM budget)",
         "tilejit's own emulation contract (include/xpu_emulation.h)"),
    Rule("device-functions", "every function the device header defines, member functions included, is "
         "__device__ (device code may call only device functions)",
         "the guide, function qualifiers; the emulation defines __device__ away, so only this rule sees it"),
    Rule("cluster-barrier", "sync_cluster() appears only as `if (tj_team > 1) sync_cluster();` in a kernel "
         "that maps programs to teams (tj_team_size): every core of the cluster must reach each barrier",
         "tilejit's SM staging contract (targets/kunlun/plan/staging.py); the emulation checks the counts at run time"),
    Rule("async-wait", "an asynchronous DMA (GM2LM_ASYNC/LM2GM_ASYNC) is waited for by mfence() as soon as "
         "the loops issuing its batch close, before anything touches its LM",
         "the guide: _ASYNC copies need mfence() before the data is used; tilejit's batch contract "
         "(codegen/lowering.py `_copy_rows`)"),
    Rule("prefetch-wait", "a tile fetched for the next loop iteration (GM2LM_ASYNC into a `next` slot) is "
         "issued inside that loop and waited for by the mfence() that ends the loop body",
         "the guide: _ASYNC copies need mfence() before the data is used; public kernels double-buffer "
         "(GM2LM_ASYNC of the next chunk while computing this one); tilejit's prefetch contract "
         "(codegen/prefetch.py)"),
    Rule("include-order", "host headers before the XPU ones, and xpu/runtime.h (XPUStream) among them",
         "the guide: the other order redefines symbols"),
)}

_HOST_MATH = re.compile(r"(?<![\w.])(?:(?:exp2|exp|expm1|log|log2|log10|log1p|sqrt|cbrt|sin|cos|tan|tanh|asin|acos|"
                        r"atan|atan2|erf|erfc|floor|ceil|trunc|round|rint|nearbyint|fabs|fma|fmod|fmax|fmin|pow|"
                        r"ldexp|frexp|copysign)f\s*\(|INFINITY\b|NAN\b|HUGE_VALF\b)")
_DMA_IN, _DMA_OUT = r"(?:GM2LM(?:_ASYNC)?|tj_gm2lm_\w+)\(", r"(?:LM2GM(?:_ASYNC)?|tj_lm2gm_\w+)\("


def _base(expr: str) -> str:
    """The pointer an address expression starts from: `(v3 + r0 * 16) + s_` -> v3."""
    m = re.match(r"[(&\s]*(\w+)", expr)
    return m.group(1) if m else ""


def _memory_rules(program: str, out: list) -> None:
    gptrs = set(re.findall(r"__global_ptr__ \w+\* (?:const )?(\w+)", program))
    for line in program.splitlines():
        if re.search(_DMA_IN, line) or re.search(_DMA_OUT, line):
            for m in re.finditer(_DMA_IN + r"([^,]+),\s*([^,]+),", line):
                if _base(m.group(1)) not in gptrs or _base(m.group(2)) in gptrs:
                    out.append(("dma-direction", line.strip()))
            for m in re.finditer(_DMA_OUT + r"([^,]+),\s*([^,]+),", line):
                if _base(m.group(2)) not in gptrs or _base(m.group(1)) in gptrs:
                    out.append(("dma-direction", line.strip()))
            continue
        bare = re.sub(r"__global_ptr__ \w+\*", "", line)   # declarations are not dereferences
        if "*(" in bare or any(re.search(rf"\b{g}\s*\[", bare) or re.search(rf"\*\s*{g}\b", bare) for g in gptrs):
            out.append(("gm-deref", line.strip()))


_PREFETCH = re.compile(r"GM2LM_ASYNC\([^,]+,\s*(?:\(tj_u16_alias\*\))?\(*(next\d+)\b")


def _async_rule(program: str, out: list) -> None:
    lines = [ln.strip() for ln in program.splitlines()]
    for i, line in enumerate(lines):
        if "_ASYNC(" not in line:
            continue
        if _PREFETCH.search(line):
            if not _waited_at_loop_end(lines, i, _PREFETCH.search(line).group(1)):
                out.append(("prefetch-wait", line))
            continue
        after = next((ln for ln in lines[i + 1:] if ln != "}"), "")
        if "_ASYNC(" not in after and after != "mfence();":
            out.append(("async-wait", line))


def _waited_at_loop_end(lines: list[str], at: int, slot: str) -> bool:
    """Whether line `at` (a copy into `slot`) lies in the loop over the counter `slot` is declared
    with (`next = pf + ((k + 1) & 1) * n`) and that loop's body ends with `mfence();`."""
    decl = next((m for ln in lines[:at] for m in [re.search(rf"\b{slot} = \w+ \+ \(\((\w+) \+ 1\) & 1\)", ln)] if m),
                None)
    head = next((j for j in range(at - 1, -1, -1)
                 if decl and re.match(rf"for \(\w+ {decl.group(1)} = 0;", lines[j])), None)
    if head is None:
        return False
    depth = 0
    for j in range(head, len(lines)):
        depth += lines[j].count("{") - lines[j].count("}")
        if depth == 0:   # the loop's closing brace
            body_end = next((ln for ln in reversed(lines[head + 1:j]) if ln), "")
            return at < j and body_end == "mfence();"
    return False


def lint(source: str) -> list[tuple[str, str]]:
    """(rule name, offending text) for each violation in a generated .xpu source."""
    out: list[tuple[str, str]] = []
    code = re.sub(r"//[^\n]*", "", source)
    if "_program(" not in code or "__global__ void" not in code:
        return [("stride-loop", "no program function and kernel")]
    program = code.split("_program(", 1)[1].split("__global__ void", 1)[0]
    kernel_fn = code.split("__global__ void", 1)[1].split('extern "C"', 1)[0]
    device = code.split('extern "C"', 1)[0]
    _memory_rules(program, out)
    _async_rule(program, out)
    out += [("host-math", m.group(0)) for m in _HOST_MATH.finditer(device)]
    out += [("openmp", m.group(0)) for m in re.finditer(r"#pragma\s+omp[^\n]*", device)]
    out += [("wide-types", m.group(0)) for m in re.finditer(r"\bint64_t\b|\blong\b|\bsize_t\b|\bdouble\b", code)]
    if not re.search(r"for \(int p = cluster_id\(\) \* core_num\(\) \+ core_id\(\); p < total; "
                     r"p \+= cluster_num\(\) \* core_num\(\)\)", kernel_fn):
        out.append(("stride-loop", kernel_fn.strip()[:80]))
    if not re.search(r"int tj_rc = \w+<<<\d+, \d+, \(XPUStream\)stream>>>.*\n\s*return tj_rc;", code):
        out.append(("launch-status", "no checked launch"))
    barriers = re.findall(r"[^\n;{}]*\bsync_cluster\(\);", program)
    if any(b.strip() != "if (tj_team > 1) sync_cluster();" for b in barriers) or \
            (barriers and "tj_team_size(" not in kernel_fn):
        out.append(("cluster-barrier", next((b.strip() for b in barriers
                                             if b.strip() != "if (tj_team > 1) sync_cluster();"), barriers[0].strip())))
    for decl in re.findall(r"__local__ .*", program + kernel_fn):
        if not re.search(r"__local__ \w+ (\w+)\[\d+\]; TJ_LM_USE\(\1\)", decl):
            out.append(("lm-accounted", decl.strip()))
    return out


_DEFINITION = re.compile(r"(?:^|[;{}])\s*((?:template\s*<[^>]*>\s*)?(?:[\w:<>]+\s+)*?[\w:<>]+[\s*&]+)(\w+)\s*"
                         r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const\s*)?\{", re.M)


def device_functions(header: str) -> tuple[int, list[str]]:
    """(functions defined, the names of those without __device__) in a device header's text."""
    code = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", header), flags=re.S)
    found, host = 0, []
    for m in _DEFINITION.finditer(code):
        head, name = m.group(1), m.group(2)
        if re.search(r"\b(if|for|while|switch|return|else|do|operator)\b", f"{head} {name}"):
            continue
        found += 1
        if not re.search(r"\b(TJ_DEV|__device__|__global__)\b", head):
            host.append(name)
    return found, host


def lint_header(header: str) -> list[tuple[str, str]]:
    """Violations in the device header (include/tilejit_xpu.h)."""
    out = [("device-functions", name) for name in device_functions(header)[1]]
    code = re.sub(r"//[^\n]*", "", header)
    includes = re.findall(r'#include [<"]([^>"]+)[>"]', code)
    first_xpu = next((i for i, h in enumerate(includes) if h.startswith("xpu/")), len(includes))
    if any(not h.startswith("xpu/") for h in includes[first_xpu:]) or "xpu/runtime.h" not in includes:
        out.append(("include-order", ", ".join(includes)))
    out += [("host-math", m.group(0)) for m in _HOST_MATH.finditer(_device_part(code))]
    return out


def _device_part(header: str) -> str:
    """The header without its emulation-only blocks (`#ifdef TJ_XPU_EMULATION ... #else`)."""
    return re.sub(r"#ifdef TJ_XPU_EMULATION.*?#(?:else|endif)", "", header, flags=re.S)


def main(argv: list[str] | None = None) -> int:
    bad = 0
    for path in argv if argv is not None else sys.argv[1:]:
        try:
            with open(path) as f:
                source = f.read()
        except OSError as e:
            print(f"{path}: cannot read it ({e.strerror})", file=sys.stderr)
            return 2
        for rule, text in lint(source):
            bad += 1
            print(f"{path}: {rule}: {RULES[rule].says}\n    {text}\n    (rule from: {RULES[rule].source})")
    return 1 if bad else 0
