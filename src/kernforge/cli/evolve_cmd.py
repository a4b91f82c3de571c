"""``kernforge evolve PATH --config FILE [--out RUN_DIR] [--resume] [--kernels PAT]``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..core import ConfigError
from ..core.fmt import fmt_time
from ..core.lock import directory_lock
from ..evolve.controller import Progress
from ..pipeline.evolve import Counters, EvolveOutcome, evolve_path
from ..pipeline.evolve_config import load_config
from ..pipeline.evolve_final import measurement_text
from ..pipeline.native_evolve import evolve_native
from ..replay.native_build import bind_source
from ..replay.native_tune import RESULT
from .checks import load_all_units, not_recordings, resumable_dir, writable_dir
from .isolation import add_isolation_args, isolation
from .native_cmd import load_native_units
from .native_deploy_cmd import bind_units
from .output import console
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
    native = load_native_units(args.path, args.kernels)
    if native:
        return run_native(args, cfg, native, out)
    if args.source is not None:
        raise ConfigError("--source binds native units; none under this path",
                          hint="record the program with kernforge record -- COMMAND")
    recs, _ = load_all_units(args.path)  # damaged units skipped, each with its reason
    finished: list[str] = []
    display = _Display()
    slots = cfg.evolve_config("").eval_slots
    with directory_lock(out, "evolution run directory"), isolation(args, workers=slots) as iso, \
            line_progress(console) as lines, \
            Live(display.table(None, None), console=console, refresh_per_second=4,
                 transient=True) as live:
        display.live, display.lines = live, lines
        outcomes = evolve_path(args.path, cfg, out, kernels=args.kernels, resume=args.resume,
                               on_progress=display.update, on_kernel=display.kernel_started,
                               isolate=iso if iso is not None else False, recordings=recs,
                               remeasure=args.remeasure,
                               on_finished=lambda p: finished.append(report_finished(p)))
    for line in finished:
        console.print(line, markup=False, soft_wrap=True)
    for o in outcomes:
        print_outcome(o)
    return 0 if all(o.final.best is not None for o in outcomes) else 1


def run_native(args: argparse.Namespace, cfg: Any, units: list[Any], out: Path) -> int:
    """Native units: the kernel's captured NVRTC source, or the --source file, evolved."""
    groups: dict[str, list[Any]] = {}
    for u in units:
        groups.setdefault(u.entry, []).append(u)
    src = bind_source(args.source, includes=args.includes, defines=args.defines) \
        if args.source is not None else None
    if src is not None:
        bound = bind_units(units, src)
        groups = {k: g for k, g in groups.items() if g[0].path in bound}
    else:
        groups = {k: g for k, g in groups.items() if g[0].source is not None}
        if not groups:
            raise ConfigError("no native unit under this path carries source",
                              hint="kernels compiled with NVRTC carry theirs; for an "
                                   "nvcc-built program bind the file with --source FILE.cu")
    if args.kernels is None and len(groups) > 1:  # the kernel with the longest in-app time
        groups = dict([max(groups.items(), key=lambda kv: kv[1][0].capture.get(
            "app_time_ms") or 0.0)])
    status = 0
    with directory_lock(out, "evolution run directory"), line_progress(console) as lines:
        for entry, group in groups.items():
            name = group[0].path.name.rsplit("-", 1)[0]
            done = out / name / RESULT
            if args.resume and not args.remeasure and done.is_file():
                console.print(f"{group[0].name}: finished earlier; not measured again: {done} "
                              f"stands (--remeasure measures it again and keeps this one "
                              f"beside it)", markup=False, soft_wrap=True)
                continue
            lines.step(f"evolving {group[0].name} ({len(group)} recorded launch(es))")

            def shown(p: Any, c: Any, e: str = entry) -> None:
                lines.update(f"{e}: iteration {p.applied}, {c.evaluations} evaluations")

            o = evolve_native(group, cfg, out / name, source=src, resume=args.resume,
                              tolerance=args.tolerance, on_progress=shown,
                              remeasure=args.remeasure)
            t = o.tuning
            best = o.result.best
            console.print(f"[bold]{escape(o.kernel)}[/]: {len(o.result.programs)} programs, "
                          f"best {fmt_time(best.fitness if best else None)}", soft_wrap=True)
            if t is None:
                console.print("  no evolved source beat the recorded one", markup=False)
                status = 1
            elif t.win:
                console.print(f"  speedup {t.speedup:.3f}x over the recorded kernel "
                              f"(interleaved); result: {o.run_dir / RESULT} (kernforge export "
                              f"{o.run_dir})", markup=False)
            else:
                console.print(f"  not kept: {t.refused}", markup=False)
                status = 1
    return status
