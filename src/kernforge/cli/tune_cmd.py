"""``kernforge tune PATH``: Bayesian optimization of compile options and launch parameters."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core import ConfigError
from ..core.fmt import fmt_time
from ..harness.cache import CacheChoice
from ..harness.verdict import ci_label
from ..pipeline.units import TuneSettings, headline, summary_of, tune_units
from ..tune import Budget, SearchSpace
from .cache_arg import add_cache_arg
from .checks import (
    POSITIVE,
    float_range,
    load_all_units,
    not_recordings,
    resumable_dir,
    writable_dir,
)
from .isolation import add_isolation_args, isolation
from .output import console, notes
from .progress import LineProgress, line_progress
from .replay_cmd import tolerance_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune compile options and launch parameters of recordings",
                       description="For every recorded unit under PATH: search compile options "
                                   "and launch parameters (TPE by default), each trial compiled, "
                                   "verified against the recording and timed; the best is "
                                   "re-measured interleaved against the recorded "
                                   "configuration. Results go to a run directory.")
    p.add_argument("path", help="a recordings directory or one recorded unit")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory (default runs/tune-<date>-<time>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the studies in --out; a unit whose tuning finished is "
                        "reported from its result.json, not measured again")
    p.add_argument("--remeasure", action="store_true",
                   help="with --resume: measure finished units again too (each earlier "
                        "result.json is kept beside the new one as result.earlier-N.json)")
    add_isolation_args(p)
    p.add_argument("--preset", default="standard", choices=("quick", "standard", "full"))
    p.add_argument("--sampler", default=None,
                   help="tpe, random, exhaustive or rounds (default: tpe for units that hold "
                        "source, exhaustive for native units: their space is small)")
    p.add_argument("--trials", type=POSITIVE, default=None,
                   help="evaluations per unit (default: 30, or every point of the space with "
                        "the exhaustive sampler; cache hits do not count)")
    p.add_argument("--seconds", type=float_range(0.001), default=None,
                   help="wall-time budget per unit")
    p.add_argument("--patience", type=POSITIVE, default=None,
                   help="stop after N evaluations without improvement")
    p.add_argument("--space", type=Path, default=None,
                   help="extra dimensions (YAML, TOML or JSON), e.g. tunable #defines")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernels", default=None, metavar="PATTERN", help="only these kernels")
    p.add_argument("--tolerance", action="append", metavar="[BUF=]SPEC",
                   help="verification policy (allows fast-math-like knobs)")
    p.add_argument("--repeat", type=POSITIVE, default=7, help="timed runs per trial (default 7)")
    add_cache_arg(p)
    add_source_args(p)
    p.set_defaults(func=run)


def add_source_args(p: argparse.ArgumentParser, tunable: bool = True) -> None:
    """``--source FILE.cu -I DIR -D NAME=VALUE``: bind native units to their source."""
    g = p.add_argument_group("native units of nvcc-built programs (docs/recording-native.md)")
    g.add_argument("--source", type=Path, default=None, metavar="FILE.cu",
                   help="the CUDA file that defines the recorded kernel(s): compiled with "
                        "nvcc for the device, checked to be the recorded kernel (same mangled "
                        "name and parameter layout), then tuned from source")
    g.add_argument("-I", "--include", dest="includes", action="append", default=[],
                   metavar="DIR", help="include path for --source (repeatable)")
    g.add_argument("-D", "--define", dest="defines", action="append", default=[],
                   metavar="NAME[=VALUE]", help="macro the program's build defines, for "
                                                "--source (repeatable)")
    if not tunable:
        return
    g.add_argument("--try-define", dest="try_defines", action="append", default=[],
                   metavar="NAME=V1,V2,...", help="a tunable macro of the source: each value "
                                                  "is tried as a candidate build (repeatable)")


def define_sets(specs: list[str]) -> list[list[tuple[str, str]]]:
    """``--try-define NAME=V1,V2``: one candidate define per value."""
    out = []
    for spec in specs:
        name, _, values = spec.partition("=")
        if not name.isidentifier() or not values:
            raise ConfigError(f"--try-define {spec!r} is not NAME=V1,V2,...",
                              hint="e.g. --try-define BLOCK_ROWS=4,8,16")
        out += [[(name, v)] for v in values.split(",") if v]
    return out


def load_space_file(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    if not path.is_file():
        raise ConfigError(f"space file {path} not found", hint="give the path of a YAML, TOML "
                                                               "or JSON file")
    try:
        text = path.read_text("utf-8")
        if path.suffix in (".yaml", ".yml"):
            import yaml
            data = dict(yaml.safe_load(text) or {})
        elif path.suffix == ".toml":
            import tomllib
            data = tomllib.loads(text)
        else:
            data = dict(json.loads(text))
    except Exception as exc:
        raise ConfigError(f"cannot parse space file {path}: {exc}",
                          hint="check its syntax (YAML, TOML or JSON by extension)") from exc
    try:
        SearchSpace.from_mapping(data)  # its dimensions checked now, with the file named
    except ConfigError as exc:
        raise ConfigError(f"space file {path}: {exc.message}", hint=exc.hint) from None
    return data


def run(args: argparse.Namespace) -> int:
    if args.remeasure and not args.resume:
        raise ConfigError("--remeasure measures the finished units of a run again",
                          hint="add --resume --out RUN_DIR naming that run")
    resumable_dir(args.out, args.resume)
    out = args.out = args.out or Path("runs") / time.strftime("tune-%Y%m%d-%H%M%S")
    writable_dir(out, "--out")
    not_recordings(out, "--out")
    settings = TuneSettings(
        budget=Budget(trials=args.trials, seconds=args.seconds, patience=args.patience),
        preset=args.preset, sampler=args.sampler, seed=args.seed,
        user_space=load_space_file(args.space), tolerance=tolerance_overrides(args.tolerance),
        repeat=args.repeat,
        resume=args.resume, remeasure=args.remeasure, cache=args.cache, source=args.source,
        includes=args.includes, defines=args.defines,
        try_defines=define_sets(args.try_defines))
    units = load_all_units(args.path, args.kernels)
    done = tune_units(units, Path(out), settings, display=_Display(),
                      isolation=lambda backends: isolation(args, backends=backends),
                      notes=notes())
    if done.outcomes:
        _summary(out, done.outcomes)
    if done.finished:
        console.print(f"{len(done.finished)} unit(s) finished earlier "
                      f"({', '.join(done.finished)}) are not in this summary"
                      f"{' either' if not done.outcomes else ''}: their result.json files "
                      f"stand, as reported above", markup=False)
    return 0


class _Display:
    """Every unit, whatever it holds: a progress bar on a terminal, plain lines otherwise."""

    @contextlib.contextmanager
    def units(self) -> Iterator[_Steps]:
        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=console, disable=not console.is_terminal)
        with bar, line_progress(console) as lines:
            yield _Steps(bar, lines)


class _Steps:
    def __init__(self, bar: Progress, lines: LineProgress) -> None:
        self.bar, self.lines = bar, lines
        self.trials: int | None = None
        self.seen = _Seen()
        self.task: Any = None

    def finished(self, i: int, n: int, result: Path) -> None:
        self.lines.step(f"{i}/{n} {report_finished(result)}")

    def started(self, i: int, n: int, name: str, cache: CacheChoice,
                trials: int | None) -> Callable[[Any], None]:
        self.trials = trials
        self.task = task = self.bar.add_task(name, total=trials)
        self.seen = seen = _Seen()
        self.lines.step(f"{i}/{n} tuning {name} ("
                        + (f"{trials} evaluations" if trials else "every point of its space")
                        + f"; cache {cache.protocol}: {cache.reason})")

        def on_trial(t: Any) -> None:
            seen.add(t)
            msg = f"{name}  {seen.describe()}"
            done = min(trials, seen.evaluations) if trials else seen.evaluations
            self.bar.update(task, completed=done, description=msg)
            self.lines.update(msg)

        return on_trial

    def done(self, i: int, n: int, name: str, outcome: Any) -> None:
        self.bar.update(self.task, completed=self.trials or self.seen.evaluations)
        self.lines.step(f"{i}/{n} {name} done: {_done(self.seen, outcome)}")


def report_finished(path: Path) -> str:
    """One line for a unit whose run finished earlier: its written verdict, not re-measured."""
    try:
        doc = json.loads(path.read_text("utf-8"))
        if isinstance(doc.get("units"), list):  # a native.json of an earlier kernforge
            wins = sum(1 for u in doc["units"] if u.get("win"))
            return (f"native units: finished earlier ({len(doc['units'])} in {path.name}, "
                    f"{wins} win(s)); not measured again: {path} stands (--remeasure "
                    f"measures them again, each into a result.json of its own)")
        ci = doc.get("speedup_ci")
        figure = (f"{doc.get('status')}, speedup {float(doc['speedup']):.3f}x"
                  + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
                  + f", written {doc.get('created', '?')}")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        figure = f"unreadable ({type(exc).__name__}: {exc})"
    return (f"{path.parent.name}: finished earlier ({figure}); not measured again: {path} "
            f"stands (--remeasure measures it again and keeps this one beside it)")


class _Seen:
    """Evaluations, cache hits and the best median so far, as the progress shows them."""

    def __init__(self) -> None:
        self.evaluations = self.cached = 0
        self.best = float("inf")

    def add(self, t: Any) -> None:
        self.evaluations += bool(t.evaluated)
        self.cached += bool(t.cached)
        if t.ok and t.median is not None:
            self.best = min(self.best, t.median)

    def describe(self) -> str:
        return (f"{self.evaluations} evaluations, {self.cached} cache hits, best "
                f"{fmt_time(self.best if self.best < float('inf') else None)}")


def _done(seen: _Seen, outcome: Any) -> str:
    """A unit's closing progress line: what this command evaluated (a resumed study's earlier
    evaluations are counted apart, not as this run's), the study's best, and the interleaved
    re-measurement of the winner, which ``--resume --remeasure`` runs again."""
    o = summary_of(outcome)
    hits = o.cache_hits
    if seen.evaluations == o.evaluations:
        text = f"{seen.evaluations} evaluations, {hits} cache hits"
    else:
        text = (f"{seen.evaluations} new evaluations ({o.evaluations} in the study, "
                f"the others from its earlier run), {hits} cache hits")
    text += f", best {fmt_time(o.search_best_s)}"
    cmp = o.compared()
    if cmp is None:  # the recorded configuration stayed best, or the unit was refused
        return f"{text}; {o.verdict()[0]}"
    speedup, (lo, hi), conf = cmp
    return (text + f"; best vs recorded, measured again interleaved: {speedup:.3f}x "
            f"[{ci_label(conf)} {lo:.3f}, {hi:.3f}]")


def _headline(outcomes: Sequence[Any]) -> None:
    for line in headline(outcomes):
        console.print(line, markup=False, soft_wrap=True)


def _summary(out: Path, outcomes: Sequence[Any]) -> None:
    t = Table(title=f"tuning results in {out} (speedup: median of the per-pass ratios of an "
                    f"interleaved re-measurement, recorded vs best; times: its medians)")
    views = [summary_of(o) for o in outcomes]
    # the intervals' confidence in the header when the rows share one (they do: one protocol)
    confs = {c[2] for v in views if (c := v.compared()) is not None}
    label = ci_label(confs.pop() if len(confs) == 1 else None)
    for col in ("unit", "evaluations (cache hits)", "recorded", "best", f"speedup [{label}]",
                "best configuration", "verdict"):
        t.add_column(col)
    busy = 0
    for v in views:
        verdict, counts = v.verdict()
        busy += not counts and not verdict.startswith(("REJECTED", "not exportable: never"))
        rejected = verdict.startswith("REJECTED")
        cmp = v.compared()
        ci = f" [{cmp[1][0]:.3f}, {cmp[1][1]:.3f}]" if cmp and not rejected else ""
        base_s, best_s = v.times()
        t.add_row(v.name, f"{v.evaluations} ({v.cache_hits})", fmt_time(base_s),
                  "-" if rejected else fmt_time(best_s), f"{v.figure():.3f}x{ci}",
                  escape(v.changed()), escape(verdict))
    console.print(t)
    _headline(outcomes)
    if busy:
        console.print(f"{busy} of {len(views)} unit(s) have an inconclusive verdict (busy "
                      f"device or noisy runs): their speedups are shown but export will refuse "
                      f"them; tune again on an idle machine", markup=False)
    console.print(f"per unit: result.json, history.png, study.db under {out}", markup=False)
