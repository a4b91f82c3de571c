"""The application manifest: one TOML file per application, read strictly.

Every key is checked (an unknown key is an :class:`AppManifestError` naming it and listing the
allowed ones), every command must be present, every regular expression must compile. What can
only be checked by running the program (a check or timer pattern that never matches its
output) is checked in milestone M1 and raises the same error. See docs/applications.md.
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .manifest_fields import (
    _NAME,
    AppManifestError,
    _choice,
    _command,
    _err,
    _flag,
    _num,
    _regex,
    _str,
    strict_keys,
)

CHECK_KINDS = ("exit", "regex", "files")
FILE_FORMATS = ("text", "bytes", "float32", "float64")
TIMER_KINDS = ("wall", "regex")
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
SWITCH_KINDS = ("environment",)
STRATEGIES = ("operator", "tune", "agent")


@dataclass(frozen=True)
class Dataset:
    name: str
    run: str  # a command line (shlex-split; {source} and {python} substituted)
    expected: tuple[float, ...] = ()  # fixed values for a regex check (else the reference)

    def argv(self, source: Path) -> list[str]:
        return expand(self.run, source)


@dataclass(frozen=True)
class Check:
    kind: str = "exit"
    pattern: str | None = None
    rel: float = 0.0
    abs: float = 0.0
    files: tuple[str, ...] = ()
    format: str = "text"


@dataclass(frozen=True)
class Timer:
    kind: str = "wall"
    pattern: str | None = None
    unit: str = "s"

    def describe(self) -> str:
        """How the program's time is read, for reports."""
        if self.kind == "wall":
            return "the wall clock"
        return f"the program's own printed timer '{self.pattern}' ({self.unit})"


@dataclass(frozen=True)
class Integrate:
    strategies: tuple[str, ...] = STRATEGIES
    tune_trials: int = 20
    tune_preset: str = "quick"
    evolve_config: Path | None = None
    # without evolve_config: offline rewrites of every unit with source, this many iterations
    # (0: tune only)
    evolve_iterations: int = 24
    agent: str | None = None  # an agent command line, run in a copy of the source
    agent_timeout_s: float = 1800.0
    match_repeat: int = 10
    # lifted operators: candidates the forge's search over the designs' knobs evaluates past
    # the presets, per kernel (0: the presets only)
    lift_search_trials: int = 16
    # a kernel's later datasets try the K best candidates per path of its first (0: all)
    narrow_after_first: int = 4
    # M4: beside an integration that deploys a fused path, the one-launch arm in its rounds
    compare_one_launch: bool = True
    # the CUDA files that define the recorded kernels of an nvcc-built program, with their
    # -I directories and -D defines: bound to the units at M2's end (:mod:`.source_binding`)
    sources: tuple[Path, ...] = ()
    includes: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measure:
    rounds: int = 5  # M1: baseline rounds over every dataset
    e2e_rounds: int = 7  # M4: interleaved rounds with and without
    min_share: float = 0.05  # M2: below this share of the run the app is OUT_OF_SCOPE
    floor: float = 0.98  # M4: no dataset (nor the geometric mean) below it is deployed


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    source: Path
    build: str
    datasets: tuple[Dataset, ...]
    check: Check = field(default_factory=Check)
    timer: Timer = field(default_factory=Timer)
    switch: str = "environment"
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 3600.0
    kernels: str | None = None
    record_dataset: str = ""
    integrate: Integrate = field(default_factory=Integrate)
    measure: Measure = field(default_factory=Measure)

    def dataset(self, name: str) -> Dataset:
        return next(d for d in self.datasets if d.name == name)

    def build_argv(self, source: Path) -> list[str]:
        return expand(self.build, source)


def expand(command: str, source: Path) -> list[str]:
    """A command line as argv: ``{source}`` is the directory the program runs from (the
    original or the agent's copy), ``{python}`` this Python interpreter."""
    return [a.replace("{source}", str(source)).replace("{python}", sys.executable)
            for a in shlex.split(command)]


TOP = ("name", "source", "build", "datasets", "check", "timer", "switch", "env", "timeout_s",
       "kernels", "record_dataset", "integrate", "measure")


def _check(d: Any, src: str) -> Check:
    where = f"{src}: [check]"
    d = strict_keys(d, ("kind", "pattern", "rel", "abs", "files", "format"), "[check]",
                    source=src)
    if not isinstance(d, dict) or "kind" not in d:
        raise _err(where, "no kind: say how the program's result is checked",
                   f"write kind = one of {', '.join(repr(k) for k in CHECK_KINDS)} (\"exit\": "
                   "the exit status only, outputs not compared)")
    kind = _choice(d, "kind", where, CHECK_KINDS, "exit")
    pattern = _str(d, "pattern", where, required=kind == "regex",
                   hint="give the regular expression that finds the program's check in its "
                        "output, e.g. pattern = 'checksum ([0-9.eE+-]+)'")
    files = d.get("files", [])
    if kind == "files" and (not isinstance(files, list) or not files
                            or not all(isinstance(f, str) and f for f in files)):
        raise _err(where, "kind 'files' needs files = [\"...\"] (output files, relative to "
                          "the source directory)", "list the files the program writes")
    if kind != "regex" and pattern is not None:
        raise _err(where, f"pattern is only read by kind = 'regex', not {kind!r}",
                   "remove pattern or set kind = \"regex\"")
    return Check(kind=kind, pattern=_regex(pattern, where) if pattern else None,
                 rel=_num(d, "rel", where, 0.0), abs=_num(d, "abs", where, 0.0),
                 files=tuple(files) if kind == "files" else (),
                 format=_choice(d, "format", where, FILE_FORMATS, "text"))


def _timer(d: Any, src: str) -> Timer:
    where = f"{src}: [timer]"
    d = strict_keys(d, ("kind", "pattern", "unit"), "[timer]", source=src)
    kind = _choice(d, "kind", where, TIMER_KINDS, "wall")
    pattern = _str(d, "pattern", where, required=kind == "regex",
                   hint="give the regular expression with one group around the printed time, "
                        "e.g. pattern = 'time: ([0-9.eE+-]+) s'")
    if pattern and re.compile(_regex(pattern, where)).groups < 1:
        raise _err(where, f"pattern {pattern!r} has no group around the time",
                   "put the number in parentheses: '([0-9.eE+-]+)'")
    return Timer(kind, _regex(pattern, where) if pattern else None,
                 _choice(d, "unit", where, tuple(UNITS), "s"))


def _datasets(raw: Any, src: str) -> tuple[Dataset, ...]:
    if not isinstance(raw, list) or not raw:
        raise _err(src, "no [[datasets]]", "add at least one [[datasets]] table with name and "
                                           "run (two or more sizes are recommended)")
    out: list[Dataset] = []
    for i, d in enumerate(raw):
        where = f"{src}: datasets[{i}]"
        misplaced = [k for k in (d if isinstance(d, dict) else ()) if k in TOP and k != "name"]
        if misplaced:  # TOML puts keys written after [[datasets]] into that table
            raise _err(where, f"{misplaced[0]!r} is read as a key of this dataset",
                       f"move {misplaced[0]} above the first [[datasets]]: in TOML, keys "
                       "written after [[datasets]] belong to that dataset")
        d = strict_keys(d, ("name", "run", "expected"), f"datasets[{i}]", source=src)
        name = _str(d, "name", where, hint="give each dataset a short name, e.g. \"small\"")
        run = _str(d, "run", where, hint="give the command that runs the program on this "
                                         "dataset, e.g. run = \"./app 1024 100\"")
        if not _NAME.fullmatch(str(name)):
            raise _err(where, f"dataset name {name!r} is not a plain name (it names the "
                              "dataset's directories and logs in the run directory)",
                       "use letters, digits, '.', '_' and '-', e.g. name = \"n4096\"")
        _command(str(run), "run", where)
        exp = d.get("expected", [])
        if not isinstance(exp, list) or not all(isinstance(x, (int, float))
                                                and not isinstance(x, bool) for x in exp):
            raise _err(where, f"expected must be a list of numbers, not {exp!r}",
                       "write expected = [1.0, 2.5] (one value per group of the pattern)")
        if any(o.name == name for o in out):
            raise _err(where, f"dataset name {name!r} is used twice", "rename one")
        out.append(Dataset(str(name), str(run), tuple(float(x) for x in exp)))
    return tuple(out)


def _paths(d: Mapping[str, Any], key: str, where: str, root: Path, *, dirs: bool
           ) -> tuple[Path, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise _err(where, f"{key} must be a list of paths, not {v!r}",
                   f"write {key} = [\"main.cu\"] (relative to the source directory)")
    out = []
    for x in v:
        p = (root / x).resolve()
        if not (p.is_dir() if dirs else p.is_file()):
            what = "directory" if dirs else "file"
            raise _err(where, f"{key}: no {what} {p}",
                       f"give the program's {'include directory' if dirs else 'CUDA file'} "
                       f"relative to the source directory {root}")
        out.append(p)
    return tuple(out)


def _defines(d: Mapping[str, Any], where: str) -> tuple[str, ...]:
    v = d.get("defines", [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x.split("=", 1)[0]
                                          .isidentifier() for x in v):
        raise _err(where, f"defines must be a list of \"NAME\" or \"NAME=VALUE\", not {v!r}",
                   "write defines = [\"BLOCK=16\"] (the -D options the program is built with)")
    return tuple(v)


def _integrate(d: Any, src: str, base: Path, root: Path) -> Integrate:
    where = f"{src}: [integrate]"
    d = strict_keys(d, ("strategies", "tune_trials", "tune_preset", "evolve_config",
                        "evolve_iterations", "agent", "agent_timeout_s", "match_repeat",
                        "lift_search_trials", "narrow_after_first", "compare_one_launch",
                        "sources", "includes", "defines"),
                    "[integrate]", source=src)
    strategies = d.get("strategies", list(STRATEGIES))
    if not isinstance(strategies, list) or any(s not in STRATEGIES for s in strategies):
        raise _err(where, f"strategies {strategies!r}",
                   f"list some of: {', '.join(STRATEGIES)} (tried in that order)")
    if not strategies:  # nothing could integrate it: the run would end RESEARCH, silently
        raise _err(where, "strategies = [] names no strategy: nothing would integrate the "
                          "application", f"list at least one of: {', '.join(STRATEGIES)} (tried "
                          "in that order), or remove the key to try them all")
    evolve = _str(d, "evolve_config", where, required=False)
    if evolve and not (base / evolve).is_file():
        raise _err(where, f"evolve_config {evolve!r}: no file {(base / evolve).resolve()}",
                   "give the evolve YAML (relative to the manifest), or remove evolve_config")
    agent = _str(d, "agent", where, required=False)
    return Integrate(
        strategies=tuple(s for s in STRATEGIES if s in strategies),
        tune_trials=_num(d, "tune_trials", where, 20, lo=1, integer=True),
        tune_preset=_choice(d, "tune_preset", where, ("quick", "standard", "full"), "quick"),
        evolve_config=(base / evolve).resolve() if evolve else None,
        evolve_iterations=_num(d, "evolve_iterations", where, 24, lo=0, integer=True),
        agent=_command(agent, "agent", where) if agent else None,
        agent_timeout_s=_num(d, "agent_timeout_s", where, 1800.0, lo=1.0),
        match_repeat=_num(d, "match_repeat", where, 10, lo=1, integer=True),
        lift_search_trials=_num(d, "lift_search_trials", where, 16, lo=0, integer=True),
        narrow_after_first=_num(d, "narrow_after_first", where, 4, lo=0, integer=True),
        compare_one_launch=_flag(d, "compare_one_launch", where, True),
        sources=_paths(d, "sources", where, root, dirs=False),
        includes=_paths(d, "includes", where, root, dirs=True), defines=_defines(d, where))


def _measure(d: Any, src: str) -> Measure:
    where = f"{src}: [measure]"
    d = strict_keys(d, ("rounds", "e2e_rounds", "min_share", "floor"), "[measure]", source=src)
    m = Measure(rounds=_num(d, "rounds", where, 5, lo=1, integer=True),
                e2e_rounds=_num(d, "e2e_rounds", where, 7, lo=2, integer=True),
                min_share=_num(d, "min_share", where, 0.05), floor=_num(d, "floor", where, 0.98))
    if m.min_share >= 1.0:
        raise _err(where, f"min_share {m.min_share} must be below 1", "the default is 0.05")
    return m


def load_manifest(path: str | Path) -> Manifest:
    """Read and check the manifest at ``path`` (relative paths in it are relative to it)."""
    p = Path(path)
    src = str(p)
    try:
        doc = tomllib.loads(p.read_text("utf-8"))
    except OSError as exc:
        raise AppManifestError(f"cannot read the manifest {p}: {exc.strerror or exc}",
                               hint="give the path of the application's .toml manifest"
                               ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AppManifestError(f"{p} is not valid TOML: {exc}",
                               hint="check the syntax (strings in quotes, [tables])") from None
    doc = strict_keys(doc, TOP, "the manifest", source=src)
    base = p.resolve().parent
    name = _str(doc, "name", src, hint="add name = \"my-app\"")
    source = (base / str(_str(doc, "source", src, hint="add source = \"/path/to/the/program\""
                                                       " (its directory)"))).resolve()
    if not source.is_dir():
        raise _err(src, f"the source directory {source} does not exist",
                   "give the directory that holds the program (relative to the manifest)")
    build = _str(doc, "build", src, hint="add build = \"make\" (run in the source directory; "
                                         "build = \"true\" when there is nothing to build)")
    _command(str(build), "build", src)
    datasets = _datasets(doc.get("datasets"), src)
    env = doc.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _err(src, "env must be a table of strings", "write env = { NAME = \"value\" }")
    rec = str(doc.get("record_dataset", datasets[0].name))
    if rec not in {d.name for d in datasets}:
        raise _err(src, f"record_dataset {rec!r} is not a dataset",
                   f"choose one of: {', '.join(d.name for d in datasets)}")
    switch = strict_keys(doc.get("switch", {}), ("kind",), "[switch]", source=src)
    if "check" not in doc:
        raise _err(src, "no [check]: kernforge could not tell a wrong result of the program "
                        "from a right one (only that it exited 0)",
                   "say how the program's own result is checked, e.g. [check] kind = \"regex\" "
                   "pattern = 'checksum ([0-9.eE+-]+)' rel = 1e-9 (a value it prints), or "
                   "[check] kind = \"files\" files = [\"out.dat\"] (files it writes); to "
                   "check the exit status only, write [check] kind = \"exit\"")
    check = _check(doc["check"], src)
    if check.kind == "regex" and check.pattern and re.compile(check.pattern).groups == 0 and \
            any(d.expected for d in datasets):
        raise _err(src, "datasets give expected values but the check pattern has no group",
                   "put the values in parentheses in the pattern, or remove expected")
    return Manifest(
        path=p.resolve(), name=str(name), source=source, build=str(build), datasets=datasets,
        check=check, timer=_timer(doc.get("timer", {}), src),
        switch=_choice(switch, "kind", f"{src}: [switch]", SWITCH_KINDS, "environment"),
        env=dict(env), timeout_s=_num(doc, "timeout_s", src, 3600.0, lo=1.0),
        kernels=_str(doc, "kernels", src, required=False), record_dataset=rec,
        integrate=_integrate(doc.get("integrate", {}), src, base, source),
        measure=_measure(doc.get("measure", {}), src))
