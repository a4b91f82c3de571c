"""What a program prints, read from its C, C++ and CUDA sources, for ``kernforge app draft``:
its own check (a "PASS"/"FAIL" line, "Verification ...", a checksum or an error norm) and its
own timer line, each as the regular expression a manifest's ``[check]`` or ``[timer]`` takes.

Statements are read, not run: ``printf``/``fprintf(stdout|stderr, ...)``/``puts`` with their
format strings, and ``std::cout``/``std::cerr`` chains (``std::endl`` ends a line,
manipulators are skipped). Each printed line becomes a list of literal text and values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_EXT = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp")
NUM = "([0-9.eE+-]+)"
_CONV = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|L|z|j|t|I64)?"
                   r"([diouxXeEfFgGaAcsp%])")
_FLOAT = set("eEfFgGaA?")
SUCCESS = re.compile(r"\b(PASS(?:ED)?|Pass(?:ed)?|passed|SUCCESS(?:FUL)?|Success(?:ful)?|"
                     r"successful(?:ly)?)\b")
_FAIL_OF = {"PASS": "FAIL", "PASSED": "FAIL", "Pass": "Fail", "Passed": "Fail", "passed": "fail"}
_NEGATED = re.compile(r"\bnot\b|n't\b|\bunable\b|\bcannot\b|\berror\b", re.IGNORECASE)
FAILURE = re.compile(r"\b(FAIL(?:ED|URE)?|Fail(?:ed|ure)?|failed|ERROR)\b")
_TIME = re.compile(r"time|elapsed|duration|\bt\s*=", re.IGNORECASE)
_UNIT = re.compile(r"^\W{0,2}(seconds|secs?|s|milliseconds|msecs?|ms|microseconds|usecs?|us)"
                   r"\b[)\]]?", re.IGNORECASE)
_UNIT_IN = re.compile(r"[(\[](seconds|secs?|s|milliseconds|msecs?|ms|microseconds|usecs?|us)"
                      r"[)\]]", re.IGNORECASE)
_NOT_CHECK = re.compile(r"time|elapsed|bandwidth|gb/s|gflop|throughput|speed|usage|size|"
                        r"iteration|grid|dim", re.IGNORECASE)
_CHECK_WORDS = (("checksum", 4), ("check sum", 4), ("error", 3), ("norm", 3), ("residual", 3),
                ("rms", 3), ("diff", 2), ("sum", 2), ("energy", 2), ("result", 1))


@dataclass(frozen=True)
class Value:
    expr: str
    conv: str  # the printf conversion, "?" for a value of a cout chain


Part = str | Value


@dataclass(frozen=True)
class Line:
    file: str
    lineno: int
    parts: tuple[Part, ...]
    statement: str  # the source statement, one line, for the manifest's comment

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else "{}" for p in self.parts)


@dataclass(frozen=True)
class Guess:
    kind: str  # check: "regex" | "exit"; timer: "regex"
    pattern: str
    source: str  # where it was read: "main.cu:152 printf(...)"
    unit: str = "s"
    numeric: bool = False  # a check whose group captures a value (needs a tolerance)
    note: str = ""


def _blank_comments(text: str) -> str:
    """``text`` with comments replaced by spaces (newlines kept), string literals intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _until(text: str, i: int, stop: str) -> int:
    """The index of the first ``stop`` character at nesting depth 0 from ``i``."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if depth == 0 and c in stop:
            return i
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return i
        i += 1
    return n


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside strings and brackets."""
    parts, depth, i, last, n = [], 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[last:i].strip())
            i = last = i + len(sep)
            continue
        depth += c in "([{"
        depth -= c in ")]}"
        i += 1
    parts.append(text[last:].strip())
    return parts


_ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "", "%": "%"}


def _literal(expr: str) -> str | None:
    """The value of ``expr`` when it is only adjacent string literals, else None."""
    expr = expr.strip()
    lits = re.findall(r'"((?:[^"\\]|\\.)*)"', expr)
    if not lits or re.sub(r'"(?:[^"\\]|\\.)*"', "", expr).strip():
        return None
    return "".join(re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), s)
                   for s in lits)


def _printf_parts(args: list[str]) -> list[Part] | None:
    fmt = _literal(args[0]) if args else None
    if fmt is None:
        return None
    parts: list[Part] = []
    pos, k = 0, 1
    for m in _CONV.finditer(fmt):
        parts.append(fmt[pos:m.start()])
        pos = m.end()
        if m.group(5) == "%":
            parts.append("%")
            continue
        k += (m.group(2) == "*") + (m.group(3) == "*")
        parts.append(Value(args[k] if k < len(args) else "", m.group(5)))
        k += 1
    parts.append(fmt[pos:])
    return parts


_MANIP = re.compile(r"^(std::)?(setw|setprecision|setfill|fixed|scientific|left|right|flush|"
                    r"boolalpha|hex|dec|defaultfloat|showpoint)\b")


def _cout_parts(items: list[str]) -> list[Part]:
    parts: list[Part] = []
    for it in items:
        lit = _literal(it)
        if lit is not None:
            parts.append(lit)
        elif re.fullmatch(r"(std::)?endl|'\\n'", it):
            parts.append("\n")
        elif not _MANIP.match(it) and it:
            parts.append(Value(it, "?"))
    return parts


_CALL = re.compile(r"\b(?:std::)?(printf|fprintf|puts)\s*\(|\b(?:std::)?(cout|cerr)\s*<<")


def print_lines(path: Path, name: str) -> list[Line]:
    """Every line the statements of one source file print."""
    text = _blank_comments(path.read_text("utf-8", errors="replace"))
    lines: list[Line] = []
    for m in _CALL.finditer(text):
        start = m.end()
        if m.group(1):
            end = _until(text, start, ")")
            args = _split(text[start:end], ",")
            if m.group(1) == "fprintf":
                if not args or args[0] not in ("stdout", "stderr"):
                    continue
                args = args[1:]
            parts = ([args[0] and _literal(args[0]) or "", "\n"] if m.group(1) == "puts"
                     else _printf_parts(args))
        else:
            end = _until(text, start, ";")
            parts = _cout_parts(_split(text[start:end], "<<"))
        if not parts:
            continue
        lineno = text.count("\n", 0, m.start()) + 1
        statement = " ".join(text[m.start():end + 1].split())[:120]
        cur: list[Part] = []
        for p in parts:
            pieces: list[Part] = list(p.split("\n")) if isinstance(p, str) else [p]
            for j, piece in enumerate(pieces):
                if j:
                    if any(isinstance(x, Value) or x.strip() for x in cur):
                        lines.append(Line(name, lineno, tuple(cur), statement))
                    cur = []
                if piece != "":
                    cur.append(piece)
        if any(isinstance(x, Value) or x.strip() for x in cur):
            lines.append(Line(name, lineno, tuple(cur), statement))
    return lines


def _text_rx(text: str) -> str:
    """A literal piece as a regular expression (single spaces as they are, runs of spaces
    matching one or more)."""
    return re.sub(r"(?:\\ ){2,}", " +", re.escape(text)).replace("\\ ", " ")


def _ternary(expr: str) -> tuple[str, str] | None:
    m = re.search(r'\?\s*"((?:[^"\\]|\\.)*)"\s*:\s*"((?:[^"\\]|\\.)*)"', expr)
    return (m.group(1), m.group(2)) if m else None


def _success_line(line: Line) -> tuple[str, str] | None:
    """The line as it reads when the program's check passes, if it says so, and the word
    the program says instead when it fails."""
    out: list[str] = []
    word = fail = ""
    for p in line.parts:
        if isinstance(p, str):
            out.append(_text_rx(p))
            m = SUCCESS.search(p)
            word = word or (m.group(1) if m else "")
            continue
        pair = _ternary(p.expr) if p.conv in "s?" else None
        if pair and SUCCESS.search(pair[1]) and not SUCCESS.search(pair[0]):
            pair = (pair[1], pair[0])  # error ? "FAIL" : "PASS"
        if pair and SUCCESS.search(pair[0]) and not SUCCESS.search(pair[1]):
            out.append(_text_rx(pair[0].strip()))
            word = word or SUCCESS.search(pair[0]).group(1)  # type: ignore[union-attr]
            f = FAILURE.search(pair[1])
            fail = f.group(1) if f else fail
        else:
            out.append(".*?")
    if not word or FAILURE.search(line.text()) or _NEGATED.search(line.text()):
        return None
    body = "".join(out).strip().removesuffix(" +")
    return "^ *" + body + " *$", fail or _FAIL_OF.get(word, "(?:FAIL|[Ff]ail)")


def _before(line: Line, i: int) -> str:
    """The literal text just before part ``i``, from the value before it."""
    text = ""
    for p in reversed(line.parts[:i]):
        if isinstance(p, Value):
            break
        text = p + text
    return text


def _after(line: Line, i: int) -> str:
    text = ""
    for p in line.parts[i + 1:]:
        if isinstance(p, Value):
            break
        text += p
    return text


def _lead(text: str) -> str:
    """``text`` from its first letter (", t = " -> "t = "), past what is left of the value
    before it ("s) kernel time: " -> "kernel time: ": the unit of the previous time)."""
    text = re.sub(r"^\W{0,2}(?:seconds|secs?|s|milliseconds|msecs?|ms|microseconds|usecs?|us)"
                  r"[)\]]", "", text, flags=re.IGNORECASE)
    m = re.search(r"[A-Za-z]", text)
    return text[m.start():] if m else text


def _unit(name: str) -> str:
    n = name.lower()
    return "ms" if n.startswith(("ms", "msec", "milli")) else \
        "us" if n.startswith(("us", "usec", "micro")) else "s"


def _sentence(line: Line, i: int) -> tuple[str, str]:
    """The line up to part ``i`` from its first letter, as text and as a pattern in which
    the values before it match any word ("Total time for {} iterations: ")."""
    text, rx = "", ""
    for p in line.parts[:i]:
        if isinstance(p, Value):
            text, rx = text + "{}", rx + r"\S+"
        else:
            lit = p if text else _lead(p)
            text, rx = text + lit, rx + _text_rx(lit)
    return text, rx.rstrip(" ").removesuffix(" +")


def _timer(line: Line) -> tuple[int, Guess] | None:
    """The best-ranked time the line prints (a line may print a host and a kernel time)."""
    found: list[tuple[int, Guess]] = []
    for i, p in enumerate(line.parts):
        if not isinstance(p, Value) or p.conv not in _FLOAT:
            continue
        before, after = _lead(_before(line, i)), _after(line, i)
        head = _text_rx(before.rstrip())
        if not _TIME.search(before):  # "Total time for %i iterations: %f s"
            before, head = _sentence(line, i)
        ua, ub = _UNIT.match(after.strip()), _UNIT_IN.search(before)
        if not (ua or ub) or not _TIME.search(before) or re.match(r"\W*[GMK]B/s", after.strip()):
            continue
        unit = _unit((ua or ub).group(1))  # type: ignore[union-attr]
        tail = _text_rx(after.strip()[:ua.end()]) if ua else ""
        rx = head + " *" + NUM + (" *" + tail if tail else "")
        low = before.lower()
        score = (3 * ("kernel" in low) + ("average" in low or "avg" in low)
                 + any(w in low for w in ("solve", "compute", "execution", "elapsed"))
                 - 5 * any(w in low for w in ("reference", "cpu", "host", "serial",
                                              "sequential", "golden"))
                 - 3 * any(w in low for w in ("transfer", "copy", "memcpy", "offload")))
        src = f"{line.file}:{line.lineno} {line.statement}"
        found.append((score, Guess("regex", rx, src, unit)))
    return max(found, key=lambda x: x[0]) if found else None


def _numeric(line: Line) -> tuple[int, Guess] | None:
    for i, p in enumerate(line.parts):
        if not isinstance(p, Value) or p.conv not in _FLOAT | set("diuld"):
            continue
        before = _lead(_before(line, i))
        low = before.lower()
        score = max((s for w, s in _CHECK_WORDS
                     if w in low and _near(low[low.rindex(w) + len(w):])), default=0)
        if not score or _NOT_CHECK.search(before) or (p.conv in "diu" and score < 4):
            continue
        src = f"{line.file}:{line.lineno} {line.statement}"
        rx = _text_rx(before.rstrip()) + " *" + NUM
        return score, Guess("regex", rx, src, numeric=True)
    return None


def _near(rest: str) -> bool:
    """Whether a value printed after a check word and ``rest`` is that word's value: a
    qualifier or two may come between ("Error (L2norm): ", "Checksum: min_u, max_u = "), a
    sentence does not ("Internal error: used option long name '", "Error reading data on
    line ": a message on a failure path)."""
    return len(re.findall(r"[a-z][a-z0-9_]*", rest)) <= 3


def sources(directory: Path) -> list[Path]:
    """The program's source files, the one with ``main`` first (at most two levels deep)."""
    found = sorted(p for p in directory.rglob("*") if p.suffix in SOURCE_EXT and p.is_file()
                   and len(p.relative_to(directory).parts) <= 2 and p.stat().st_size < 2 ** 20)
    rx = re.compile(r"\bint\s+main\s*\(")
    return sorted(found, key=lambda p: not rx.search(p.read_text("utf-8", errors="replace")))


def guess(directory: Path) -> tuple[Guess, Guess | None, list[Guess]]:
    """The program's own check (``exit`` when none is printed), its timer (or None) and the
    other timer lines it prints."""
    lines = [ln for p in sources(directory)
             for ln in print_lines(p, str(p.relative_to(directory)))]
    passes = [(ln, got) for ln in lines if (got := _success_line(ln))]
    passes.sort(key=lambda x: "PASS" not in x[1][0].upper())
    check: Guess | None = None
    if passes:
        ln, (rx, fail) = passes[0]
        check = Guess("regex", rf"\A(?![\s\S]*\b{fail})[\s\S]*{rx}",
                      f"{ln.file}:{ln.lineno} {ln.statement}",
                      note=f"matches when a line reads {rx!r} and no line says {fail!r}")
    if check is None:
        nums = sorted((g for ln in lines if (g := _numeric(ln))), key=lambda x: -x[0])
        check = nums[0][1] if nums else Guess("exit", "", "no check found in what the "
                                              "program prints")
    timers = [g for ln in lines if (g := _timer(ln))]
    ranked = sorted(range(len(timers)), key=lambda k: (-timers[k][0], k))
    best = timers[ranked[0]][1] if timers else None
    others: list[Guess] = []
    for k in ranked[1:]:
        other = timers[k][1]
        if all(o.pattern != other.pattern for o in [*others, *([best] if best else [])]):
            others.append(other)
    return check, best, others
