"""``kernforge evolve PATH --config FILE [--out RUN_DIR] [--resume] [--kernels PAT]``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..core.fmt import fmt_time
from ..core.lock import directory_lock
from ..evolve.controller import Progress
from ..pipeline.evolve import Counters, EvolveOutcome, evolve_path
from ..pipeline.evolve_config import load_config
from .checks import writable_dir
from .isolation import add_isolation_args, isolation
from .output import console
from .progress import LineProgress, line_progress


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
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--kernels", default=None, metavar="PAT",
                   help="kernel names to evolve (fnmatch; default: the hottest kernel)")
    add_isolation_args(p)
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

    def kernel_started(self, name: str, n: int) -> None:
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
    ci = f" (95% CI {f.ab.ci_low:.3f}-{f.ab.ci_high:.3f})" if f.ab else ""
    console.print(f"  best: {f.best.id if f.best else '-'}, {f.status}, speedup over the "
                  f"recorded kernel {f.speedup:.3f}x{ci} (interleaved)", markup=False)
    if f.message:
        console.print(f"  {f.message}", markup=False)
    console.print(f"  lineage: {' -> '.join(s['id'] for s in r.lineage)}", markup=False)
    console.print(f"  report: {r.files.get('report')}, {r.files.get('png')}", markup=False)
    if f.result_json:
        console.print(f"  result: {f.result_json} (kernforge export {o.run_dir.parent})",
                      markup=False)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    out = args.out or Path("runs") / time.strftime("evolve-%Y%m%d-%H%M%S")
    writable_dir(out, "--out")
    display = _Display()
    slots = cfg.evolve_config("").eval_slots
    with directory_lock(out, "evolution run directory"), isolation(args, workers=slots) as iso, \
            line_progress(console) as lines, \
            Live(display.table(None, None), console=console, refresh_per_second=4,
                 transient=True) as live:
        display.live, display.lines = live, lines
        outcomes = evolve_path(args.path, cfg, out, kernels=args.kernels, resume=args.resume,
                               on_progress=display.update, on_kernel=display.kernel_started,
                               isolate=iso if iso is not None else False)
    for o in outcomes:
        print_outcome(o)
    return 0 if all(o.final.best is not None for o in outcomes) else 1
