"""``kernforge app draft SUITE_DIR``: one manifest per program of a suite, drafted from its
build files (:mod:`.draft_build`) and what its sources print (:mod:`.draft_output`), for the
user to review.

Every guessed line is marked ``REVIEW`` in a comment that says where it was read. A program
that cannot be drafted (no build file, no run target, an input file that is not there, MPI)
is refused with the reason. A manifest already in the output directory (perhaps reviewed and
edited) is kept unless ``force``.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from .draft_build import (
    SHELL_OPS,
    BuildInfo,
    assignments,
    build_info,
    missing_inputs,
    uses_mpi,
)
from .draft_output import Guess, guess, sources
from .manifest import AppManifestError, load_manifest

REVIEW = "REVIEW"
CHECK_REL = 1e-4


@dataclass(frozen=True)
class Drafted:
    """One program's outcome: ``drafted``, ``kept`` (a manifest was there) or ``refused``."""
    name: str
    directory: Path
    status: str
    detail: str
    manifest: Path | None = None


def _q(text: str) -> str:
    """A TOML string: literal (single quotes) when it can be, else basic with escapes."""
    if "'" not in text and not any(ord(c) < 32 for c in text):
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False)


def _comment(text: str) -> str:
    return "# " + " ".join(text.split())


def plain_name(text: str) -> str:
    """A directory name as a manifest and dataset name (letters, digits, ``.``, ``_``, ``-``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return name or "program"


def programs(suite: Path, only: list[str]) -> list[Path]:
    """The suite's program directories (those with a build file or sources), sorted; the
    suite directory itself when it is one program."""
    def wanted(d: Path) -> bool:
        return not only or any(fnmatch.fnmatchcase(d.name, g) for g in only)

    subs = [d for d in sorted(suite.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    found = [d for d in subs if wanted(d) and (any((d / f).is_file() for f in (
        "Makefile", "makefile", "GNUmakefile", "CMakeLists.txt")) or sources(d))]
    if not found and wanted(suite) and any((suite / f).is_file() for f in (
            "Makefile", "makefile", "GNUmakefile", "CMakeLists.txt")):
        found = [suite]
    return found


def _check_lines(check: Guess) -> list[str]:
    out = ["", "[check]"]
    if check.kind == "exit":
        out += [_comment(f"{REVIEW}: {check.source}: only the exit status is checked, the "
                         "results are not compared. If the program prints a value or writes "
                         "a file that shows its result, check that instead (kind = \"regex\" "
                         "or \"files\", docs/applications.md)"), 'kind = "exit"']
        return out
    out.append(_comment(f"{REVIEW}: the program's own check, read from {check.source}"))
    if check.note:
        out.append(_comment(check.note))
    out += ['kind = "regex"', f"pattern = {_q(check.pattern)}"]
    if check.numeric:
        out += [_comment(f"{REVIEW}: the printed value must agree with what the unmodified "
                         "program printed within this relative tolerance (a replaced kernel "
                         "may round differently)"), f"rel = {CHECK_REL:g}"]
    return out


def _timer_lines(timer: Guess | None, others: list[Guess]) -> list[str]:
    out = ["", "[timer]"]
    if timer is None:
        return out + [_comment("the program prints no timer kernforge recognized: the wall "
                               "clock of the whole process"), 'kind = "wall"']
    out += [_comment(f"{REVIEW}: the program's own timer, read from {timer.source}; its "
                     "speedups are then of the region it times. kind = \"wall\" times the "
                     "whole process instead (start-up and any CPU reference included)"),
            'kind = "regex"', f"pattern = {_q(timer.pattern)}", f'unit = "{timer.unit}"']
    for o in others[:3]:
        out.append(_comment(f"other timer it prints: pattern = {_q(o.pattern)} "
                            f"unit = \"{o.unit}\""))
    return out


def _assigns(run: str) -> bool:
    try:
        return assignments(shlex.split(run)) > 0
    except ValueError:  # an unclosed quote: the draft does not load, and says so
        return False


def manifest_text(name: str, directory: Path, info: BuildInfo, check: Guess,
                  timer: Guess | None, others: list[Guess]) -> str:
    """The drafted manifest (TOML with comments)."""
    lines = [_comment(f"Drafted by `kernforge app draft` from {directory} ({info.kind})."),
             _comment(f"Every line marked {REVIEW} is a guess: confirm or correct it, then "
                      f"run: kernforge app run {name}.toml --out runs/{name}"),
             f"name = {_q(name)}", f"source = {_q(str(directory))}",
             _comment(f"{REVIEW}: {info.build_note}"), f"build = {json.dumps(info.build)}"]
    active = 0
    for i, (run, where) in enumerate(info.runs, 1):
        switch = _switch(info.runs[0][0], run)
        block = ["", "[[datasets]]", f'name = "run{i}"']
        if SHELL_OPS.search(run):
            block.append(_comment(f"{REVIEW}: run through sh -c (the command uses the "
                                  "shell's operators)"))
            run = shlex.join(["sh", "-c", run])
        elif _assigns(run):  # VAR=1 ./main: a manifest's run is no shell, env sets them
            run = f"env {run}"
        guessed = "" if where.startswith("the Makefile") or "add_test" in where else \
            f"{REVIEW}: "
        block += [_comment(f"{guessed}from {where}"), f"run = {json.dumps(run)}"]
        if switch:  # a dataset that may not print the check would block the whole program
            lines += ["", _comment(f"{REVIEW}: this command differs from the first in what "
                                   f"looks like a switch ({switch}): it may not print the "
                                   "same check. Uncomment it to add it as a dataset:")]
            lines += [f"# {x}" if x else "#" for x in block[1:]]
            continue
        active += 1
        lines += block
    if active == 1:
        lines.append(_comment(f"{REVIEW}: one dataset; a second size (another [[datasets]]) "
                              "shows whether a speedup holds across sizes"))
    lines += _check_lines(check) + _timer_lines(timer, others)
    return "\n".join(lines) + "\n"


def _switch(first: str, other: str) -> str:
    """Where ``other`` differs from ``first`` in an argument that is 0 in one and 1 in the
    other (a mode such as "verify"), e.g. "argument 5: 1 -> 0"; "" when nowhere."""
    a, b = first.split(), other.split()
    if len(a) != len(b):
        return ""
    return ", ".join(f"argument {k}: {x} -> {y}" for k, (x, y) in enumerate(zip(a, b))
                     if x != y and {x, y} <= {"0", "1"})


def draft_program(directory: Path, out: Path, *, arch: str, force: bool) -> Drafted:
    """Draft one program's manifest into ``out/NAME.toml``, or refuse it with the reason."""
    name = plain_name(directory.name)
    dest = out / f"{name}.toml"
    if dest.exists() and not force:
        return Drafted(name, directory, "kept", f"{dest} exists (--force to draft it again)",
                       dest)
    info = build_info(directory, arch)
    srcs = sources(directory)
    if info.mpi or uses_mpi(srcs):
        return Drafted(name, directory, "refused", "an MPI program: kernforge app runs one "
                       "process per command; write its manifest by hand (run = \"mpirun ...\")")
    if info.refusal:
        return Drafted(name, directory, "refused", info.refusal)
    missing = sorted({f for run, _ in info.runs for f in missing_inputs(run, directory)})
    if missing:
        return Drafted(name, directory, "refused", f"input file(s) not there: "
                       f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} (put "
                       "them where the run command expects them, then draft again)")
    check, timer, others = guess(directory)
    text = manifest_text(name, directory, info, check, timer, others)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.toml.draft"
    tmp.write_text(text, "utf-8")
    try:
        n = len(load_manifest(tmp).datasets)
    except AppManifestError as exc:
        tmp.unlink()
        return Drafted(name, directory, "refused", f"the draft does not load: {exc.message}")
    tmp.replace(dest)
    timed = f"timer '{timer.pattern}' ({timer.unit})" if timer else "wall clock"
    what = f"check {check.kind}" + (f" '{check.pattern}'" if check.pattern else "") + \
        f"; {timed}"
    return Drafted(name, directory, "drafted", f"{n} dataset(s); {what}", dest)


def draft_suite(suite: Path, out: Path, *, only: list[str], arch: str = "sm_90",
                force: bool = False) -> list[Drafted]:
    """Every program of ``suite`` (those matching a glob of ``only``, when given)."""
    return [draft_program(d, out, arch=arch, force=force)
            for d in programs(suite.resolve(), only)]
