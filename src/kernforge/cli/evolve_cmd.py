"""``kernforge evolve PATH --config FILE [--out RUN_DIR] [--resume] [--kernels PAT]``."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..core import ConfigError
from ..core.fmt import fmt_time
from ..evolve.controller import Progress
from ..pipeline.evolve import Counters
from ..pipeline.evolve_config import load_config
from ..pipeline.evolve_final import measurement_text
from ..pipeline.units import EvolveOutcome, NativeEvolveOutcome, evolve_units
from .checks import not_recordings, resumable_dir, writable_dir
from .isolation import add_isolation_args, isolation
from .output import console, notes
from .progress import LineProgress, line_progress
from .tune_cmd import add_source_args, report_finished


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evolve", help="evolve the source of recorded kernels (MAP-Elites)",
                       description="Evolve the source of recorded kernels: proposers (offline "
                                   "rewrites, LLMs, agent commands) suggest changes, every "
                                   "candidate is verified on every recording of its kernel and "
                                   "tuned; the winner is re-measured interleaved against the "
                                   "recorded kernel and exported as a result.json for "
                                   "kernforge export. Resumable after a crash (--resume).")
    p.add_argument("path", help="a recordings directory (or one unit)")
    p.add_argument("--config", required=True, type=Path, metavar="FILE",
                   help="YAML or TOML run configuration (see examples/evolve-cpu.yaml)")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory (default runs/evolve-<time>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out; a kernel whose run finished is reported "
                        "from its result.json, not measured again")
    p.add_argument("--remeasure", action="store_true",
                   help="with --resume: measure the winners of finished runs again (each "
                        "earlier result.json is kept beside the new one)")
    p.add_argument("--kernels", default=None, metavar="PAT",
                   help="kernel names to evolve (fnmatch; default: the hottest kernel)")
    p.add_argument("--tolerance", default=None, metavar="SPEC",
                   help="native units: verify written memory under SPEC (e.g. rel:1e-6)")
    add_isolation_args(p)
    add_source_args(p, tunable=False)
    p.set_defaults(func=run)


class _Display:
    def __init__(self) -> None:
        self.kernel, self.t0 = "", time.monotonic()
        self.live: Live | None = None
        self.lines = LineProgress(console, enabled=False)  # plain lines off a terminal

    def table(self, p: Progress | None, c: Counters | None) -> Table:
        t = Table(title=f"evolving {escape(self.kernel)}", show_header=True)
        for col in ("iteration", "best", "evaluations", "proposer calls", "in flight",
                    "elapsed"):
            t.add_column(col)
        best = fmt_time(p.best.fitness) if p and p.best and p.best.fitness else "-"
        t.add_row(str(p.applied if p else 0), best, str(c.evaluations if c else 0),
                  f"{c.proposals} ({c.proposal_errors} unusable)" if c else "0",
                  str(p.in_flight if p else 0), f"{time.monotonic() - self.t0:.0f} s")
        return t

    def update(self, p: Progress, c: Counters) -> None:
        if self.live is not None:
            self.live.update(self.table(p, c))
        best = fmt_time(p.best.fitness) if p.best and p.best.fitness else "-"
        self.lines.update(f"{self.kernel}: iteration {p.applied}, {c.evaluations} evaluations, "
                          f"best {best}")

    def finished(self, name: str, result: Path) -> None:
        console.print(report_finished(result), markup=False, soft_wrap=True)

    def evolved(self, o: Any) -> None:
        if isinstance(o, NativeEvolveOutcome):
            print_native_outcome(o)
        else:
            print_outcome(o)

    def started(self, name: str, n: int) -> None:
        self.kernel = f"{name} ({n} recordings)"
        self.t0 = time.monotonic()
        self.lines.step(f"evolving {self.kernel}")
        if self.live is not None:
            self.live.update(self.table(None, None))


def print_outcome(o: EvolveOutcome) -> None:
    r, f = o.report, o.final
    console.print(f"[bold]{escape(o.kernel)}[/]: {r.programs} programs, {r.evaluations} "
                  f"evaluations ({r.evaluations_failed} rejected), {r.llm_calls} proposer "
                  f"calls, {r.evaluations_per_hour:.0f} evaluations/hour")
    console.print(f"  time: proposers {r.llm_s:.1f} s, compile {r.compile_s:.1f} s, "
                  f"evaluation {r.evaluation_s:.1f} s (wall {r.wall_s:.1f} s)")
    for why, n in r.llm_error_kinds:  # a proposer that cannot work must not pass unnoticed
        console.print(f"  [yellow]proposer error[/] ({n} of {r.llm_calls} calls): {escape(why)}")
    console.print(f"  best: {f.best.id if f.best else '-'}, {measurement_text(f)}",
                  markup=False, soft_wrap=True)
    console.print(f"  lineage: {' -> '.join(s['id'] for s in r.lineage)}", markup=False)
    console.print(f"  report: {r.files.get('report')}, {r.files.get('png')}", markup=False)
    if f.result_json:
        console.print(f"  result: {f.result_json} (kernforge export {o.run_dir.parent})",
                      markup=False)


def run(args: argparse.Namespace) -> int:
    if args.remeasure and not args.resume:
        raise ConfigError("--remeasure measures the winners of a finished run again",
                          hint="add --resume --out RUN_DIR naming that run")
    resumable_dir(args.out, args.resume)
    cfg = load_config(args.config)
    out = args.out = args.out or Path("runs") / time.strftime("evolve-%Y%m%d-%H%M%S")
    writable_dir(out, "--out")
    not_recordings(out, "--out")
    done = evolve_units(args.path, cfg, out, kernels=args.kernels, display=_Shown(),
                        isolation=lambda slots: isolation(args, workers=slots),
                        resume=args.resume, remeasure=args.remeasure, tolerance=args.tolerance,
                        source=args.source, includes=args.includes, defines=args.defines,
                        notes=notes())
    return 0 if done.succeeded else 1


class _Shown:
    """What ``kernforge evolve`` shows while it runs, for every kernel whatever recorded it:
    a live table (plain lines off a terminal), then each kernel's outcome."""

    @contextlib.contextmanager
    def units(self) -> Iterator[_Display]:
        display = _Display()
        with line_progress(console) as lines, \
                Live(display.table(None, None), console=console, refresh_per_second=4,
                     transient=True) as live:
            display.live, display.lines = live, lines
            yield display


def print_native_outcome(o: NativeEvolveOutcome) -> None:
    t, best = o.tuning, o.result.best
    console.print(f"[bold]{escape(o.kernel)}[/]: {len(o.result.programs)} programs, "
                  f"best {fmt_time(best.fitness if best else None)}", soft_wrap=True)
    if t is None:
        console.print("  no evolved source beat the recorded one", markup=False)
    elif t.win:
        console.print(f"  speedup {t.speedup:.3f}x over the recorded kernel "
                      f"(interleaved); result: {o.result_path} (kernforge "
                      f"export {o.run_dir})", markup=False)
    else:
        console.print(f"  not kept: {t.refused}", markup=False)
