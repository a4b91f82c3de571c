"""Static checks on candidate source (C and CUDA), on the syntax tree (tree-sitter).

A candidate may not create threads, processes or streams, launch kernels from the device, read
clocks or timers or sleep, do I/O, keep mutable state across calls (``static`` locals, mutable
globals, ``__device__``/``__managed__`` variables), call host functions from device code, or use
fast-math intrinsics and pragmas while its outputs are verified bitwise. Each finding names its
rule (reason code ``static:<rule>``), the symbol and the line.

Names are matched on syntax nodes, not on raw text, so comments and string literals never
trigger a rule; the text of ``#define`` bodies, pragmas, attributes and inline ``asm`` is
scanned as well (a macro can hide a call, ``asm`` can read the cycle counter). Ambiguous names
(``time``, ``clock``, ``read``, ``sleep``, ...) count only where they are called. What the
*recorded* source itself does is excused (:func:`new_findings`): the baseline already does it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import KernelSource
from ..syntax import parser as _parser
from ..syntax import text as _text
from ..syntax import walk as _walk

_THREAD = {"pthread_create", "pthread_detach", "thrd_create", "fork", "vfork", "clone",
           "posix_spawn", "posix_spawnp", "CreateThread", "_beginthread", "_beginthreadex"}
_STREAM = {"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
           "cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelEx",
           "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2DAsync",
           "cudaLaunchHostFunc", "cudaStreamAddCallback", "cudaDeviceSynchronize",
           "cudaStreamSynchronize", "cuLaunchKernel", "cuStreamCreate", "cudaEventRecord"}
_TIMER = {"clock_gettime", "clock_getres", "gettimeofday", "ftime", "getrusage", "timespec_get",
          "omp_get_wtime", "omp_get_wtick", "__rdtsc", "__rdtscp", "_rdtsc",
          "__builtin_ia32_rdtsc", "__builtin_ia32_rdtscp", "__builtin_readcyclecounter",
          "mach_absolute_time", "clock64", "__nanosleep", "nanosleep", "usleep", "sched_yield",
          "QueryPerformanceCounter", "globaltimer", "alarm", "setitimer", "timer_create"}
_IO = {"fopen", "fdopen", "freopen", "fclose", "fread", "fwrite", "fprintf", "printf", "puts",
       "fputs", "fputc", "putchar", "fgets", "fgetc", "getchar", "fscanf", "scanf", "perror",
       "pread", "pwrite", "mmap", "munmap", "socket", "connect", "listen", "accept", "sendto",
       "recvfrom", "popen", "execv", "execve", "execl", "execlp", "execvp", "dlopen", "dlsym",
       "getenv", "setenv", "putenv", "syscall", "ioctl", "sigaction", "atexit", "_exit",
       "quick_exit", "unlink", "mkdir", "remove", "rename", "ofstream", "ifstream", "cout",
       "cerr"}
# ambiguous names: only a call counts (a variable called ``time`` is fine)
_CALLED = {"thread": {"async"}, "timer": {"time", "clock", "times", "sleep"},
           "io": {"open", "read", "write", "close", "send", "recv", "system", "exit", "abort",
                  "signal", "raise", "kill"}}
_QUALIFIED = {"thread": {"thread", "jthread", "async"}, "timer": {"chrono"}}
_FASTMATH = {"__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__sinf", "__cosf",
             "__sincosf", "__tanf", "__powf", "__fdividef", "__fdivide", "__saturatef"}
_FASTMATH_TEXT = re.compile(r"fast-?math|Ofast|unsafe-math|associative-math|reciprocal-math|"
                            r"finite-math|no-signed-zeros|fp-contract\s*=\s*(fast|on)|"
                            r"\bfp\s+reassociate|\bfp\s+contract\s*\(\s*(fast|on)|"
                            r"float_control|FP_CONTRACT\s+ON|"
                            r"fp_contract\s*\(\s*(fast|on)|fp-?model\s*[=\s]\s*(fast|aggressive)|"
                            r"approx-func|no-honor-(nans|infinities)|limited-range|"
                            r"denormal-fp-math|use_fast_math|ftz\s*=\s*true|"
                            r"prec-(div|sqrt)\s*=\s*false", re.IGNORECASE)
# one compiler option (C compilers and nvcc/NVRTC) that lets results differ bit-for-bit
_FASTMATH_OPTIONS = re.compile(
    r"^--?(use_fast_math|use-fast-math)(=true)?$|^--?ftz=true$|"
    r"^--?(prec-div|prec-sqrt|prec_div|prec_sqrt)=false$|"
    r"^-O(fast)$|^-ffast-math$|^-ffp-contract=(fast|on)$|^-funsafe-math-optimizations$|"
    r"^-freciprocal-math$|^-ffinite-math-only$|^-fno-signed-zeros$|^-fassociative-math$|"
    r"^-fno-honor-(nans|infinities)$|^-fapprox-func$|^-fcx-limited-range$|"
    r"^-fcx-fortran-rules$|^-f?fp-model[=:]?(fast|aggressive)(=\d)?$|^-mrecip(=(?!none$).*)?$|"
    r"^-mdaz-ftz$|^-fdenormal-fp-math(-f32)?=(?!ieee$).*$|^-fexcess-precision=fast$",
    re.IGNORECASE)
# two-word spellings: nvcc ``--ftz true``, ``--prec-div false``, icx ``-fp-model fast``
_FASTMATH_PAIRS = {("--ftz", "true"), ("-ftz", "true"),
                   ("--prec-div", "false"), ("-prec-div", "false"),
                   ("--prec-sqrt", "false"), ("-prec-sqrt", "false"),
                   ("-fp-model", "fast"), ("-fp-model", "aggressive"),
                   ("--fp-model", "fast"), ("-ffp-model", "fast"), ("-ffp-model", "aggressive")}
# options whose value is itself a list of options (``-Xcompiler=-ffast-math,-O3``)
_NESTED = re.compile(r"^(--?Xcompiler|--?compiler-options|--?Xptxas|--?ptxas-options|"
                     r"-Wp|-Wc|-Xclang|-mllvm)(?:[=,](.*))?$")
_ASM_TIMER = re.compile(r"rdtscp?|rdpmc|globaltimer|%clock|cntvct|cntpct|nanosleep",
                        re.IGNORECASE)
_PRAGMA_ASYNC = re.compile(r"\bomp\b.*(\btarget\b.*\bnowait\b|\bnowait\b.*\btarget\b|"
                           r"\bdetach\s*\()")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_SCOPE_TYPES = {"translation_unit", "linkage_specification", "declaration_list"}
_HARMLESS_QUALIFIERS = {"__shared__", "__constant__"}
_MESSAGES = {"thread": "creates a thread or process", "stream": "creates a stream or launches "
             "work asynchronously", "timer": "reads a clock or timer, or sleeps",
             "io": "does I/O", "fastmath": "fast-math (outputs are verified bitwise)",
             "host": "calls a host function from device code"}


#: rules from the most to the least specific: a candidate is refused for the first that applies
RULES = ("thread", "stream", "timer", "io", "host", "state", "fastmath")


@dataclass(frozen=True)
class Finding:
    """One rule a candidate's source breaks, where."""

    rule: str  # thread, stream, timer, io, state, fastmath, host
    line: int  # 1-based
    symbol: str
    message: str

    @property
    def reason(self) -> str:
        return f"static:{self.rule}"

    def describe(self) -> str:
        return f"line {self.line}: {self.message}"


def _line(node: Any) -> int:
    return int(node.start_point[0]) + 1


def _name_rule(name: str, called: bool, bitwise: bool) -> str | None:
    for rule, names in (("thread", _THREAD), ("stream", _STREAM), ("timer", _TIMER),
                        ("io", _IO)):
        if name in names or (called and name in _CALLED.get(rule, ())):
            return rule
    if bitwise and name in _FASTMATH:
        return "fastmath"
    return None


def _is_callee(node: Any) -> bool:
    parent = node.parent
    return parent is not None and parent.type == "call_expression" \
        and parent.child_by_field_name("function") == node


def _finding(rule: str, node: Any, symbol: str, what: str = "") -> Finding:
    return Finding(rule, _line(node), symbol, f"{symbol}: {what or _MESSAGES[rule]}")


def _scan_text(text: str, node: Any, bitwise: bool) -> Iterator[Finding]:
    """Names in the text of a macro body, pragma or attribute (calls recognized by '(')."""
    for m in _IDENT.finditer(text):
        called = text[m.end():].lstrip().startswith("(")
        rule = _name_rule(m.group(), called, bitwise)
        if rule:
            yield _finding(rule, node, m.group(), "in a macro/pragma: " + _MESSAGES[rule])


def _directive(node: Any, bitwise: bool) -> Iterator[Finding]:
    text = _text(node)
    if node.type == "preproc_call":
        if _PRAGMA_ASYNC.search(text):
            yield _finding("thread", node, "#pragma omp", "OpenMP work that outlives the call "
                           "(target nowait / task detach)")
        if bitwise and _FASTMATH_TEXT.search(text):
            yield _finding("fastmath", node, text.strip().splitlines()[0][:60])
    else:  # a #define: the macro body may hide a call
        value = node.child_by_field_name("value")
        if value is not None:
            yield from _scan_text(_text(value), node, bitwise)


def _asm(node: Any) -> Iterator[Finding]:
    m = _ASM_TIMER.search(_text(node))
    if m:
        yield _finding("timer", node, m.group(), f"inline asm reads {m.group()}")


def _declared_names(decl: Any) -> list[tuple[str, Any]]:
    """(name, declarator node) of each variable a declaration declares (not prototypes)."""
    out = []
    for d in decl.children_by_field_name("declarator"):
        inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
        node = inner
        while node is not None and node.type not in ("identifier", "function_declarator"):
            node = node.child_by_field_name("declarator")
        if node is not None and node.type == "identifier":
            out.append((_text(node), inner))
    return out


def _mutable(decl: Any, declarator: Any) -> bool:
    quals = {_text(c) for c in decl.children if c.type == "type_qualifier"}
    if quals & {"constexpr", "__constant__"}:
        return False
    node, const_pointer = declarator, True
    while node is not None and node.type in ("pointer_declarator", "array_declarator"):
        if node.type == "pointer_declarator":
            const_pointer = any(c.type == "type_qualifier" and _text(c) == "const"
                                for c in node.children)
        node = node.child_by_field_name("declarator")
    return "const" not in quals or not const_pointer


def _state(decl: Any) -> Iterator[Finding]:
    """Mutable variables that outlive a call: file scope, or static/thread_local locals."""
    storage = {_text(c) for c in decl.children if c.type == "storage_class_specifier"}
    quals = {_text(c) for c in decl.children if c.type == "type_qualifier"}
    file_scope = decl.parent is not None and decl.parent.type in _SCOPE_TYPES
    persistent = storage & {"static", "thread_local", "_Thread_local", "__thread"}
    if not (file_scope or persistent) or quals & _HARMLESS_QUALIFIERS:
        return
    for name, declarator in _declared_names(decl):
        if "extern" in storage or _mutable(decl, declarator):
            where = "global" if file_scope else "static local"
            yield Finding("state", _line(decl), name, f"{name}: mutable {where} variable keeps "
                          f"state across calls (use locals, or make it const)")


def _device_functions(root: Any) -> tuple[set[str], list[Any]]:
    """Names of host-only functions defined in a CUDA source, and the device function bodies."""
    host: set[str] = set()
    device: list[Any] = []
    for n in _walk(root):
        if n.type != "function_definition":
            continue
        words = {c.type for c in n.children} | {_text(c) for c in n.children
                                                if c.type == "attribute_specifier"}
        decl = n.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        name_node = decl.child_by_field_name("declarator") if decl is not None else None
        name = _text(name_node) if name_node is not None else ""
        if words & {"__global__", "__device__"}:
            device.append(n)
        elif "__host__" not in words and name:
            host.add(name)
    return host, device


def _host_calls(root: Any) -> Iterator[Finding]:
    host, device = _device_functions(root)
    for fn in device:
        for n in _walk(fn):
            if n.type == "call_expression":
                callee = n.child_by_field_name("function")
                if callee is not None and _text(callee) in host:
                    yield _finding("host", n, _text(callee))


def _qualified(node: Any) -> Iterator[Finding]:
    text = _text(node)
    if not text.startswith("std::"):
        return
    for rule, names in _QUALIFIED.items():
        parts = set(text.split("::"))
        hit = parts & names
        if hit:
            yield _finding(rule, node, text)


def _node_findings(n: Any, bitwise: bool, language: str) -> Iterator[Finding]:
    t = n.type
    if t == "identifier":
        rule = _name_rule(_text(n), _is_callee(n), bitwise)
        if rule:
            yield _finding(rule, n, _text(n))
    elif t == "qualified_identifier":
        yield from _qualified(n)
    elif t in ("preproc_call", "preproc_def", "preproc_function_def"):
        yield from _directive(n, bitwise)
    elif t == "gnu_asm_expression" or t == "asm_statement":
        yield from _asm(n)
    elif t in ("attribute_specifier", "attribute_declaration") and bitwise \
            and _FASTMATH_TEXT.search(_text(n)):
        yield _finding("fastmath", n, _text(n)[:60])
    elif t == "declaration":
        yield from _state(n)
    elif t == "kernel_call_syntax":
        yield _finding("stream", n, "<<<...>>>", "launches a kernel from the device")


def check_source(code: str, language: str, *, bitwise: bool = True) -> list[Finding]:
    """Every finding in ``code`` (``language`` "c" or "cuda"; other languages: none), sorted
    by line. ``bitwise``: outputs are verified bitwise, so fast-math is a finding too."""
    if language not in ("c", "cuda"):
        return []
    root = _parser(language).parse(code.encode()).root_node
    found = [f for n in _walk(root) for f in _node_findings(n, bitwise, language)]
    if language == "cuda":
        found.extend(_host_calls(root))
    unique = {(f.rule, f.line, f.symbol): f for f in found}
    return sorted(unique.values(), key=lambda f: (f.line, f.rule, f.symbol))


def new_findings(candidate: KernelSource, recorded: KernelSource | None = None, *,
                 bitwise: bool = True) -> list[Finding]:
    """Findings in ``candidate`` that the recorded source does not have (same rule and symbol
    there excuses them: the recorded kernel already did that)."""
    found = check_source(candidate.code, candidate.language, bitwise=bitwise)
    if recorded is None or not found:
        return found
    excused = {(f.rule, f.symbol) for f in check_source(recorded.code, recorded.language,
                                                         bitwise=bitwise)}
    return [f for f in found if (f.rule, f.symbol) not in excused]


def _option_findings(flags: list[str]) -> Iterator[tuple[str, str, str]]:
    """(rule, flag, why) for every fast-math spelling and every option the check cannot see
    through (a response file, a ``-D`` whose value hides fast-math or a forbidden call)."""
    fast = _MESSAGES["fastmath"]
    i = 0
    while i < len(flags):
        f = flags[i]
        nxt = flags[i + 1] if i + 1 < len(flags) else None
        nested = _NESTED.match(f)
        if _FASTMATH_OPTIONS.match(f):
            yield "fastmath", f, fast
        elif nxt is not None and (f.lower(), nxt.lower()) in _FASTMATH_PAIRS:
            yield "fastmath", f"{f} {nxt}", fast
            i += 1
        elif f.startswith("@"):
            yield "fastmath", f, "options read from a file cannot be checked"
        elif f in ("-D", "--define-macro") and nxt is not None:
            yield from ((r, f"{f} {nxt}", _MESSAGES[r]) for r, _ in _define_findings(nxt))
            i += 1
        elif f.startswith(("-D", "--define-macro=")):
            value = f.split("=", 1)[1] if f.startswith("--") else f[2:]
            yield from ((r, f, _MESSAGES[r]) for r, _ in _define_findings(value))
        elif nested:
            inner, symbol = nested.group(2), f
            if inner is None and nxt is not None:
                inner, symbol, i = nxt, f"{f} {nxt}", i + 1
            parts = [p for p in re.split(r"[,\s]+", inner or "") if p]
            yield from ((r, symbol, w) for r, _, w in _option_findings(parts))
        elif not f.startswith("-fno-") and _FASTMATH_TEXT.search(f):
            yield "fastmath", f, fast
        i += 1


def _define_findings(text: str) -> Iterator[tuple[str, str]]:
    """(rule, symbol) for a ``#define`` value (or ``-DNAME=VALUE``) that carries fast-math text
    (a ``_Pragma("GCC optimize(...)")``), a fast-math intrinsic or a name a candidate may not
    use (a macro can hide a call)."""
    if _FASTMATH_TEXT.search(text):
        yield "fastmath", text[:60]
    for m in _IDENT.finditer(text):
        called = text[m.end():].lstrip().startswith("(")
        rule = _name_rule(m.group(), called, True)
        if rule:
            yield rule, m.group()


def check_options(options: Mapping[str, Any], recorded: Mapping[str, Any] | None = None, *,
                  bitwise: bool = True) -> list[Finding]:
    """Fast-math flags smuggled in through free-form ``extra_options`` (the fast-math knobs
    themselves are refused by the backend unless a tolerance is declared), and ``-D`` values
    that hide a forbidden call. Options that cannot be parsed are a finding too (what the
    compiler would make of them is unknown), unless they are exactly the recorded ones.
    Fast-math counts only when ``bitwise``."""
    extra = str(options.get("extra_options", "") or "")
    was = str((recorded or {}).get("extra_options", "") or "")
    if extra == was:
        return []
    try:
        flags = shlex.split(extra)
    except ValueError as exc:
        return [Finding("fastmath", 0, "extra_options",
                        f"extra_options {extra!r} cannot be parsed ({exc}): fast-math flags "
                        "cannot be ruled out")] if bitwise else []
    try:
        old = {f for _, f, _ in _option_findings(shlex.split(was))}
    except ValueError:
        old = set()
    return [Finding(rule, 0, f, f"option {f}: {why}")
            for rule, f, why in _option_findings(flags)
            if f not in old and (bitwise or rule != "fastmath")]


def check_defines(defines: Mapping[str, Any] | Sequence[tuple[str, Any]],
                  recorded: Mapping[str, Any] | Sequence[tuple[str, Any]] = (), *,
                  bitwise: bool = True) -> list[Finding]:
    """Findings in the values of a variant's ``#define``s (compiled as ``-DNAME=VALUE``): a
    value can carry a fast-math pragma (``_Pragma(...)``), a fast-math intrinsic or a forbidden
    call that the source scan never sees. A define the recorded variant has with the same value
    is excused. Fast-math counts only when ``bitwise``."""
    items = dict(defines.items() if isinstance(defines, Mapping) else defines)
    old = dict(recorded.items() if isinstance(recorded, Mapping) else recorded)
    found = []
    for name, value in sorted(items.items()):
        if name in old and str(old[name]) == str(value):
            continue
        for rule, symbol in _define_findings(str(value)):
            if rule != "fastmath" or bitwise:
                found.append(Finding(rule, 0, symbol,
                                     f"#define {name} {value!s:.60}: {_MESSAGES[rule]}"))
    return found
