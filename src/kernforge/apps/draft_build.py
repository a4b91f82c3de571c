"""What a program's build files say about building and running it, for ``kernforge app draft``.

Read, never executed: a ``Makefile`` (its variables, the ``run`` target's recipe, an
architecture variable such as ``ARCH = sm_60``), a stand-alone ``CMakeLists.txt`` (its
``add_test`` commands) and a README's ``./program ...`` lines. What a run command needs that is
not there (an input file) and what the program is (MPI) are found here too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_ASSIGN = re.compile(r"^(?:override\s+|export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*"
                     r"(::=|:=|\?=|\+=|=)\s*(.*)$")
_RULE = re.compile(r"^([^\s:=#][^:=]*?)\s*::?(?!=)\s*(.*)$")
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SM = re.compile(r"^(?:sm|compute)_\d+[a-z]?$")


def is_arch(text: str) -> bool:
    """Whether ``text`` names a GPU architecture as nvcc does (``sm_90``, ``compute_80``)."""
    return bool(_SM.match(text))
SHELL_OPS = re.compile(r"[|;&<>`]|\$\(")
_MAX_RUNS = 3


@dataclass(frozen=True)
class BuildInfo:
    """What the build files say: how to build, which command lines run the program (each
    with where it came from), what is wrong with them."""
    kind: str = ""  # "Makefile", "CMakeLists.txt" or "" (no build file)
    build: str = ""
    build_note: str = ""
    runs: tuple[tuple[str, str], ...] = ()  # (command line, where it came from)
    more_runs: int = 0  # run lines beyond the ones kept
    refusal: str = ""  # why no manifest can be drafted from these files
    mpi: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


def _logical_lines(text: str) -> list[str]:
    """The Makefile's lines with backslash continuations joined."""
    out: list[str] = []
    buf = ""
    for line in text.splitlines():
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _strip_comment(line: str) -> str:
    i = line.find("#")
    return line if i < 0 else line[:i]


def _expand(text: str, variables: dict[str, str], depth: int = 0) -> str:
    if depth > 10:
        return text
    done = _REF.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), text)
    return done if done == text else _expand(done, variables, depth + 1)


def read_makefile(path: Path, arch: str) -> BuildInfo:
    """The build command (``make``, with ``VAR=arch`` for a variable that names a GPU
    architecture) and the ``run`` target's command lines, variables expanded."""
    text = path.read_text("utf-8", errors="replace")
    variables: dict[str, str] = {}
    rules: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in _logical_lines(text):
        if raw.startswith("\t"):
            if current is not None:
                current.append(raw[1:].strip())
            continue
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        current = None
        m = _ASSIGN.match(line)
        if m and not line.startswith(("ifeq", "ifneq", "ifdef", "ifndef")):
            name, op, value = m.groups()
            if op == "+=":
                variables[name] = (variables.get(name, "") + " " + value).strip()
            elif op != "?=" or name not in variables:
                variables[name] = value.strip()
            continue
        r = _RULE.match(line)
        if r:
            targets = r.group(1).split()
            current = []
            for t in targets:
                rules.setdefault(t, current)
    arch_vars = [n for n, v in variables.items() if _SM.match(_expand(v, variables).strip())]
    for n in arch_vars:
        variables[n] = arch
    build = "make" + "".join(f" {n}={arch}" for n in arch_vars)
    note = (f"{', '.join(arch_vars)} set to {arch}: the GPU architecture of the machine that "
            "runs it" if arch_vars else "the Makefile's default target")
    mpi = bool(re.search(r"\bmpi(?:cc|cxx|c\+\+|run|exec|CC)\b", text))
    if "run" not in rules:
        return BuildInfo("Makefile", build, note, refusal="the Makefile has no run target",
                         mpi=mpi)
    runs: list[tuple[str, str]] = []
    skipped = 0
    for recipe in rules["run"]:
        line = _expand(recipe, variables).lstrip("@-+ ").strip()
        if not line or line.split()[0] in ("echo", "cd", "rm", "mkdir", "cp", "ln", "true"):
            continue
        if re.search(r"\$[({]", line):
            return BuildInfo("Makefile", build, note, mpi=mpi, refusal=(
                f"the run target's command {recipe!r} uses make functions kernforge does "
                "not expand"))
        if len(runs) == _MAX_RUNS:
            skipped += 1
            continue
        runs.append((line, f"the Makefile's run target: {recipe}"))
    if not runs:
        return BuildInfo("Makefile", build, note, mpi=mpi,
                         refusal="the Makefile's run target runs no command")
    return BuildInfo("Makefile", build, note, tuple(runs), skipped, mpi=mpi)


def read_cmake(path: Path) -> BuildInfo:
    """A stand-alone CMake project (``project(...)``) built in ``build/``; its ``add_test``
    commands as the runs. One that is part of a larger build (no ``project``) is refused."""
    text = path.read_text("utf-8", errors="replace")
    if not re.search(r"^\s*project\s*\(", text, re.MULTILINE | re.IGNORECASE):
        return BuildInfo("CMakeLists.txt", refusal=(
            "CMakeLists.txt is part of a larger build (no project()): build it from the "
            "suite's top directory and write the manifest by hand"))
    build = "sh -c 'cmake -S . -B build && cmake --build build'"
    runs = []
    for m in re.finditer(r"add_test\s*\(([^)]*)\)", text, re.IGNORECASE):
        words = m.group(1).split()
        if "COMMAND" in words:
            cmd = words[words.index("COMMAND") + 1:]
            if cmd:
                runs.append((shlex.join([f"./build/{cmd[0]}", *cmd[1:]]),
                             f"CMakeLists.txt: add_test({m.group(1).strip()})"))
    if not runs:
        return BuildInfo("CMakeLists.txt", build, "CMake, built in build/",
                         refusal="CMakeLists.txt adds no test (add_test) to run")
    return BuildInfo("CMakeLists.txt", build, "CMake, built in build/",
                     tuple(runs[:_MAX_RUNS]), max(0, len(runs) - _MAX_RUNS))


def readme_runs(directory: Path) -> list[tuple[str, str]]:
    """``./program args`` lines of the program's README (a shell prompt ``$`` allowed)."""
    out: list[tuple[str, str]] = []
    for p in sorted(directory.glob("README*")):
        if not p.is_file():
            continue
        for line in p.read_text("utf-8", errors="replace").splitlines():
            m = re.match(r"^\s*(?:\$\s*)?(\./[\w.+-]+(?:\s+[^#`]*)?)$", line)
            if m and len(out) < _MAX_RUNS:
                out.append((m.group(1).strip(), f"{p.name}: {line.strip()}"))
    return out


_DATA_EXT = re.compile(r"\.(txt|dat|data|bin|csv|mtx|bmp|ppm|pgm|raw|png|jpg|jpeg|wav|in|ref|"
                       r"graph|gr|gz|bz2|fa|fasta|obj|ply|json|xml|h5|nc|tsv|edges?)$", re.IGNORECASE)
_OUTPUT = re.compile(r"out|result|res\b|\.out$", re.IGNORECASE)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


def assignments(words: list[str]) -> int:
    """How many ``NAME=value`` words (the shell's environment for the command) come before
    the program in a command line's words."""
    n = 0
    while n < len(words) and _ASSIGNMENT.fullmatch(words[n]):
        n += 1
    return n


def missing_inputs(command: str, directory: Path) -> list[str]:
    """The arguments of ``command`` that name input files that are not there (relative to
    ``directory``). An argument that names a file to write (``out``, ``result`` in its name,
    in a directory that exists) is not an input."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    missing = []
    args: list[str] = []
    skip = False
    start = 1 + assignments(words)  # VAR=value ./program: the program is no input either
    for word in words[start:]:  # the program's arguments: to the first operator, no output file
        if word in ("|", "||", "&&", ";", "&"):
            break
        if skip:
            skip = False
            continue
        if re.match(r"[\d&]?>>?", word):  # an output redirection and its file
            skip = re.fullmatch(r"[\d&]?>>?", word) is not None
            continue
        args.append(word.lstrip("<"))
    for word in args:
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if not value or value.startswith("-") or "://" in value:
            continue
        pathlike = "/" in value or _DATA_EXT.search(value) is not None
        if not pathlike or re.fullmatch(r"[\d.eE+-]+(/[\d.eE+-]+)*", value):
            continue
        p = directory / value
        if p.exists():
            continue
        if _OUTPUT.search(Path(value).name) and p.parent.is_dir():
            continue
        missing.append(value)
    return missing


def uses_mpi(sources: list[Path]) -> bool:
    """Does any source include ``mpi.h``?"""
    rx = re.compile(r'^\s*#\s*include\s*[<"]mpi\.h[>"]', re.MULTILINE)
    return any(rx.search(p.read_text("utf-8", errors="replace")) for p in sources)


def build_info(directory: Path, arch: str) -> BuildInfo:
    """The build files of ``directory``: the Makefile first (with the README's command lines
    when it has no run target), else a stand-alone CMakeLists.txt."""
    for name in ("Makefile", "makefile", "GNUmakefile"):
        if (directory / name).is_file():
            info = read_makefile(directory / name, arch)
            if info.refusal == "the Makefile has no run target":
                runs = readme_runs(directory)
                if runs:
                    return BuildInfo(info.kind, info.build, info.build_note, tuple(runs),
                                     mpi=info.mpi)
                return BuildInfo(info.kind, info.build, info.build_note, mpi=info.mpi,
                                 refusal="no run target in the Makefile and no ./program line "
                                         "in a README")
            return info
    if (directory / "CMakeLists.txt").is_file():
        info = read_cmake(directory / "CMakeLists.txt")
        if info.refusal and (runs := readme_runs(directory)) and info.build:
            return BuildInfo(info.kind, info.build, info.build_note, tuple(runs))
        return info
    return BuildInfo(refusal="no build file (Makefile or CMakeLists.txt)")
