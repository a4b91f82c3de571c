"""``kernforge stencil forge``: the forge loop over (part of) the stencil matrix; ``adopt``:
its results into a dispatch table.

On a GPU it measures; with ``--emulate`` it runs the same loop on the host emulator (small grids
only, timings meaningless: a dry run of the plumbing, the kernels and the oracle). Outputs go to
``--out``: the dispatch table the run ends with, the performance log, the idea-log section and a
summary; review them, bench the changed cells, then ``kernforge stencil adopt`` what the bench
confirmed into your own table (never the packaged one, which changes only by a developer's
commit; docs/stencil.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..forge.loop import parse_seeds, round_plan
from ..forge.parallel import forge_parallel
from ..forge.run import BUILDS, forge_run
from ..stencil.matrix import TABLE_PATH, describe_table, table_in_use, user_table
from ..stencil.spec import Cell
from .isolation import add_isolation_args, isolation
from .output import console


def add_parser(cmds: argparse._SubParsersAction, filters: Any, cells: Any) -> None:
    f = cmds.add_parser("forge", help="forge operators: one change per round, gated",
                        description="Rounds of one change each over the matrix (design, then "
                                    "one parameter per round); a candidate is kept only when "
                                    "it passes the float64 oracle and an interleaved A/B "
                                    "against the incumbent.")
    filters(f)
    f.add_argument("--rounds", type=int, default=8,
                   help=f"rounds (default 8; order: {', '.join(round_plan(99))})")
    f.add_argument("--changes", default=None, metavar="A,B,...",
                   help="the rounds' changes, comma-separated, instead of the first --rounds "
                        "of the fixed order (e.g. design,st,lz,ty)")
    f.add_argument("--seed-design", default=None, metavar="DESIGN",
                   help="start each cell this design can build from its defaults instead of "
                        "the table's operator (the table's stays the regression reference)")
    f.add_argument("--seed-operator", action="append", default=[], metavar="CELL=KEY",
                   help="start CELL from this operator (its key as the forge or the bench "
                        "prints it, any design) instead of the table's, judged as --seed-design "
                        "is: kept only if the final pass finds it faster than the table's "
                        "operator by the gate's rule (repeatable; overrides --seed-design there)")
    f.add_argument("--band", type=float, default=0.02,
                   help="minimum speedup to accept, as a fraction (default 0.02)")
    f.add_argument("--out", type=Path, default=Path("runs/forge"), help="output directory")
    f.add_argument("--table", type=Path, default=None,
                   help="the table to start from (default: the table in use: your adopted "
                        "one, else the packaged one)")
    f.add_argument("--emulate", action="store_true",
                   help="run on the host emulator instead of a GPU (small --shapes only)")
    f.add_argument("--cell-ids", default=None,
                   help="comma-separated cell ids STENCIL/NXxNYxNZ/PRECISION (instead of the "
                        "filters; any shape)")
    f.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="start no round that, with the final pass, would end after this")
    f.add_argument("--build", choices=BUILDS, default="nvrtc",
                   help="how candidates are compiled: nvrtc (default) as dispatch builds them, "
                        "on the GPU machine, so the rounds time the deployed code; nvcc: "
                        "cubins (precompiled on the host by `kernforge stencil precompile`), "
                        "the deployed build timed only in the final pass")
    f.add_argument("--gpus", type=int, default=1,
                   help="forge processes, one per visible GPU, over balanced shares of the "
                        "cells (default 1)")
    f.add_argument("--resume", action="store_true",
                   help="go on with the run journaled in --out (same options): finished "
                        "evaluations are not run again, one that never finished (it killed "
                        "its worker or the run) is quarantined as RUNTIME_FAILED; a fresh run "
                        "when --out holds none")
    add_isolation_args(f)
    f.set_defaults(func=run_forge, cells=cells)
    a = cmds.add_parser(
        "adopt", help="copy forge tables' changed operators into a dispatch table, where a "
                      "bench confirms them",
        description="For each cell whose operator a forge table (a run's --out matrix.json) "
                    "changed: with --bench, adopt it only where its latest bench row is faster "
                    "(by more than --band) than that of the operator the target dispatches; without, "
                    "adopt every change the forge tables agree on. Written atomically; exit "
                    "status 1 when a change could not be decided.")
    a.add_argument("forged", nargs="+", type=Path, help="forge tables (matrix.json)")
    a.add_argument("--into", type=Path, default=None,
                   help="the table to update (default: your own table in the data directory, "
                        "$XDG_DATA_HOME/kernforge/matrix.json or "
                        "~/.local/share/kernforge/matrix.json, which dispatch then reads in "
                        "preference to the packaged table; it starts as a copy of the "
                        "packaged one). Never the packaged table itself")
    a.add_argument("--base", type=Path, default=None,
                   help="the table the forge runs started from (default: the target); only "
                        "their changes against it are adopted")
    a.add_argument("--bench", nargs="+", type=Path, default=None, metavar="JSON",
                   help="bench JSON files, oldest first (or --by-date): the evidence")
    a.add_argument("--by-date", action="store_true",
                   help="order the bench files by the date each run recorded")
    a.add_argument("--band", type=float, default=0.0,
                   help="minimum bench speedup to adopt, as a fraction (default 0: the forge's "
                        "gate already asked 2%% of an interleaved A/B; the bench must agree)")
    a.add_argument("--cell-ids", default=None, help="only these cells (comma-separated)")
    a.add_argument("--allow-unfinished", action="store_true",
                   help="also adopt from tables without a forge-summary.json at least as new "
                        "beside them (a run that may have stopped before its final pass)")
    a.add_argument("--dry-run", action="store_true", help="report, write nothing")
    a.set_defaults(func=run_adopt)


def run_adopt(args: argparse.Namespace) -> int:
    from ..core import ConfigError
    from ..forge.adopt import adopt

    only = ({Cell.parse(c.strip()).id for c in args.cell_ids.split(",") if c.strip()}
            if args.cell_ids else None)
    if not args.band >= 0:  # also NaN
        raise ConfigError(f"--band {args.band} must be >= 0", hint="e.g. --band 0.02")
    into = args.into or user_table()
    decisions, warnings = adopt(into, args.forged, args.bench, only, base=args.base,
                                band=args.band, by_date=args.by_date,
                                allow_unfinished=args.allow_unfinished, dry_run=args.dry_run,
                                start_from=TABLE_PATH)
    for w in warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    table = Table(title=f"adopt into {into}" + (" (dry run)" if args.dry_run else ""))
    for h in ("cell", "from", "operator", "adopted", "old/new bench", "why"):
        table.add_column(h, overflow="fold")  # every operator key and file name in full
    for d in decisions:
        src = Path(d.source)
        table.add_row(d.cell, escape(f"{src.parent.name}/{src.name}"),
                      escape(f"{d.old} -> {d.new}"),
                      "[green]yes[/]" if d.adopted else "no",
                      "-" if d.ratio is None else f"{d.ratio:.3f}x", escape(d.reason))
    console.print(table)
    n, cells = sum(d.adopted for d in decisions), len({d.cell for d in decisions})
    if not decisions:
        console.print("no forge table changed an operator the target does not already have")
    else:
        verb = "would adopt" if args.dry_run else "adopted"
        console.print(f"{verb} {n} of {len(decisions)} changed operators in {cells} cells"
                      + (f"; wrote {describe_table(into)}" if n and not args.dry_run
                         else ""))
    if n and not args.dry_run and into != user_table():
        console.print(f"dispatch reads {describe_table()}; give --table {into} to commands "
                      f"that take one to use the table written now", markup=False)
    undecided = sorted({d.cell for d in decisions if d.undecided})
    if undecided:
        console.print(f"undecided (no evidence either way): {escape(', '.join(undecided))}")
    return 1 if undecided else 0


def run_forge(args: argparse.Namespace) -> int:
    from ..core import ConfigError

    if args.rounds < 1:
        raise ConfigError(f"--rounds {args.rounds} must be >= 1", hint="e.g. --rounds 8")
    if args.budget is not None and args.budget <= 0:
        raise ConfigError(f"--budget {args.budget} must be > 0", hint="e.g. --budget 400")
    changes = [c.strip() for c in args.changes.split(",") if c.strip()] if args.changes \
        else None
    if changes:
        args.rounds = len(changes)
    cells = ([Cell.parse(c.strip()) for c in args.cell_ids.split(",") if c.strip()]
             if args.cell_ids else args.cells(args))
    if not cells:
        raise ConfigError("no cells to forge", hint="check --cell-ids or the filters")
    seeds = parse_seeds(args.seed_operator)
    args.table = args.table or table_in_use()
    console.print(f"starting from {escape(describe_table(args.table))}")
    t0 = time.time()

    def say(m: str) -> None:
        console.print(f"[dim]{time.time() - t0:7.1f}s[/] {escape(m)}")

    if args.gpus > 1:
        extra = ["--resume"] * args.resume + ["--in-process"] * args.in_process
        if args.eval_timeout is not None:
            extra += ["--eval-timeout", str(args.eval_timeout)]
        if args.compile_timeout is not None:
            extra += ["--compile-timeout", str(args.compile_timeout)]
        summary = forge_parallel(cells, args.out, gpus=args.gpus, start_table=args.table,
                                 rounds=args.rounds, band=args.band, budget_s=args.budget,
                                 emulate=args.emulate, changes=changes,
                                 seed_design=args.seed_design, say=say, build=args.build,
                                 seeds=seeds, extra=extra)
        if summary["failed"]:
            console.print(f"[red]forge processes failed: {', '.join(summary['failed'])}[/] "
                          f"(their logs are above; their accepted cells are merged)")
    else:
        with isolation(args) as iso:
            summary = forge_run(cells, args.out, start_table=args.table, rounds=args.rounds,
                                band=args.band, emulate=args.emulate, budget_s=args.budget,
                                changes=changes, seed_design=args.seed_design, say=say,
                                build=args.build, seeds=seeds, isolate=iso,
                                resume=args.resume)
        for q in summary.get("quarantined", []):
            console.print(f"[yellow]quarantined:[/] {escape(q['cell'])} "
                          f"{escape(' '.join(q['evaluation']))} (RUNTIME_FAILED: it killed its "
                          f"worker or the run before; not run again)")
    table = Table(title=f"forge: {len(cells)} cells, {args.rounds} rounds "
                        f"({time.time() - t0:.0f} s)")
    for h in ("round", "change", "accepted", "rejected", "unchanged"):
        table.add_column(h)
    for r in summary["rounds"]:
        table.add_row(str(r["round"]), r["change"], str(r["accepted"]), str(r["rejected"]),
                      str(r["unchanged"]))
    console.print(table)
    if summary.get("stopped"):
        console.print(f"stopped early: {escape(summary['stopped'])}")
    bad = summary["regressed"]
    if args.emulate:
        console.print(f"zero-regression pass: {len(summary['final'])} cells re-run and "
                      "checked; not judged (host emulator timings carry no meaning)")
    else:
        console.print(f"zero-regression pass: {len(summary['final'])} cells re-measured, "
                      f"{len(bad)} regressed{': ' + ', '.join(bad) if bad else ''}")
        reverted = [r["cell"] for r in summary["final"] if r.get("reverted")]
        if reverted:
            console.print(f"reverted to their entries from before this run: "
                          f"{escape(', '.join(reverted))}")
        drift = [r["cell"] for r in summary["final"] if r.get("drift")]
        if drift:
            console.print(f"unchanged operators slower than their recorded time (drift, not a "
                          f"regression): {', '.join(drift)}")
    console.print(f"wrote {escape(str(args.out))}/matrix.json, perf-log.jsonl, ideas.md")
    if args.emulate:  # emulator timings carry no performance meaning: no regression verdict
        return 0
    return 1 if bad or summary.get("failed") else 0
