"""``kernforge stencil {list,check,forge,bench,merge,spread}`` (and the tools of
:mod:`.stencil_tools_cmd`: probe, precompile, audit, summary): the stencil operator matrix
(docs/stencil.md).

- ``list``: the cells (stencil x shape x precision) with their sizes;
- ``check --compile-only``: compile every cell's operator and the naive baseline with the host
  ``nvcc`` (no GPU needed; exit 6 on a failure); without ``--compile-only``: the oracle gate on
  the GPU, each cell in a supervised worker unless ``--in-process`` (exit 5 when an operator
  fails it, 6 on other failures: compile, launch, a crash or a hang);
- ``forge``: the forge loop (:mod:`.stencil_forge_cmd`);
- ``bench``: check and time our operators and the baselines on the GPU, print the matrix, write
  JSON / PNG / Markdown (exit 5 when one of our operators fails the oracle, 6 on other
  failures of ours); ``--resume`` goes on with an unfinished run's --json file;
- ``merge``: bench JSON files of several runs into the latest row per cell, with the matrix
  summary, roofline ceilings, speedup floors and baseline drift (:mod:`kernforge.forge.latest`;
  exit 0, or 2 on unusable input).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core import ConfigError
from ..core.jsonio import write_bytes_atomic, write_json_atomic
from ..forge import latest, report, spread
from ..forge.bench import BASELINES, BenchConfig, bench, operator_for
from ..forge.bench_isolated import IsolatedBench
from ..forge.check import check_cells
from ..forge.check_isolated import IsolatedCheck
from ..forge.compile_check import compile_only
from ..stencil.spec import Cell, matrix
from . import stencil_forge_cmd, stencil_tools_cmd
from .checks import writable_file
from .isolation import add_isolation_args, isolation
from .output import console, err_console
from .progress import line_progress


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stencils", default=None, help="comma-separated (default: all)")
    p.add_argument("--shapes", default=None, help="comma-separated NXxNYxNZ (default: all)")
    p.add_argument("--precisions", default=None, help="comma-separated fp16,fp32,fp64")


def _split(text: str | None) -> list[str] | None:
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    return items or None


def _cells(args: argparse.Namespace) -> list[Cell]:
    return matrix(_split(args.stencils), _split(args.shapes), _split(args.precisions))


def _table(args: argparse.Namespace) -> str | None:
    """``--table``, checked: a dispatch table other than the committed one."""
    path = getattr(args, "table", None)
    if path is None:
        return None
    if not Path(path).is_file():
        raise ConfigError(f"no dispatch table at {path}",
                          hint="give the matrix.json a forge run wrote, or leave --table out")
    from ..stencil.matrix import load_table

    load_table(Path(path))  # a malformed table is reported now, not per cell
    return str(path)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stencil", help="the stencil operator matrix: list, check, forge, bench",
                       description="Specialized stencil operators per (stencil, shape, "
                                   "precision), checked against a float64 oracle and timed "
                                   "against baselines (docs/stencil.md).")
    cmds = p.add_subparsers(dest="stencil_command", metavar="SUBCOMMAND")
    ls = cmds.add_parser("list", help="print the cells of the matrix")
    _filters(ls)
    ls.set_defaults(func=run_list)
    ck = cmds.add_parser("check", help="compile-only (nvcc) or oracle checks of every cell")
    _filters(ck)
    ck.add_argument("--compile-only", action="store_true",
                    help="compile with the host nvcc only (no GPU)")
    ck.add_argument("--arch", default="sm_90", help="nvcc -arch (default sm_90)")
    ck.add_argument("--nvcc", default=None, help="the nvcc to use (default: $NVCC or nvcc)")
    ck.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: 2 x cores, >= 4)")
    ck.add_argument("--no-naive", action="store_true", help="skip the naive baseline")
    ck.add_argument("--points", type=int, default=4096, help="random points per sampled check")
    ck.add_argument("--seed", type=int, default=None,
                    help="seed of the inputs (default: random, printed per check)")
    ck.add_argument("--json", type=Path, default=None, help="write the results here")
    add_isolation_args(ck)
    ck.set_defaults(func=run_check)
    stencil_forge_cmd.add_parser(cmds, _filters, _cells)
    stencil_tools_cmd.add_parsers(cmds)
    b = cmds.add_parser("bench", help="check and time operators and baselines on the GPU")
    _filters(b)
    b.add_argument("--baselines", default=",".join(BASELINES),
                   help=f"comma-separated, '' for none (default {','.join(BASELINES)})")
    b.add_argument("--json", type=Path, default=None, help="write the results here")
    b.add_argument("--table", type=Path, default=None,
                   help="dispatch through this matrix.json (default: the table in use: your "
                        "adopted one in the data directory, else the packaged one)")
    b.add_argument("--png", type=Path, default=None, help="write the chart here")
    b.add_argument("--md", type=Path, default=None, help="write the tables as Markdown here")
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--repeat", type=int, default=10, help="timed runs per runner (median)")
    b.add_argument("--passes", type=int, default=5, help="interleaved passes vs best baseline")
    b.add_argument("--points", type=int, default=4096, help="random points per sampled check")
    b.add_argument("--seed", type=int, default=None,
                   help="seed of the inputs (default: random, recorded in the JSON)")
    b.add_argument("--cell-ids", default=None,
                   help="comma-separated cell ids STENCIL/NXxNYxNZ/PRECISION (instead of the "
                        "filters)")
    b.add_argument("--changed-from", type=Path, default=None, metavar="TABLE",
                   help="only the cells whose operator differs between this matrix.json (e.g. "
                        "the table before a forge run) and the dispatch table")
    b.add_argument("--resume", action="store_true",
                   help="go on with the unfinished run in --json (same settings; its cells are "
                        "kept, its seed reused); starts afresh when that file does not exist")
    add_isolation_args(b)
    b.set_defaults(func=run_bench)
    m = cmds.add_parser("merge", help="merge bench JSON files: the latest row per cell, summary, "
                                      "baseline drift")
    m.add_argument("inputs", nargs="+", type=Path, help="bench JSON files, oldest first")
    m.add_argument("--out", type=Path, required=True, help="write the merged JSON here")
    m.add_argument("--png", type=Path, default=None, help="write the merged chart here")
    m.add_argument("--note", default="", help="the merged file's note (default: its inputs)")
    m.add_argument("--drift", type=float, default=0.10,
                   help="list a baseline slower than its fastest time in any input by more "
                        "than this fraction (default 0.10)")
    m.add_argument("--by-date", action="store_true",
                   help="order the files by the date each run recorded (default: as given)")
    m.add_argument("--table", type=Path, default=None, metavar="MATRIX_JSON",
                   help="describe this dispatch table: per cell the latest row of the table's "
                        "operator (rows of operators it no longer holds are passed over)")
    m.set_defaults(func=run_merge)
    sp = cmds.add_parser("spread", help="run-to-run spread of the memory-bound median: repeated "
                                        "bench runs of the same cells")
    sp.add_argument("inputs", nargs="+", type=Path, help="bench JSON files of the same cells")
    sp.add_argument("--goal", type=float, default=85.0, help="%% of copy to count (default 85)")
    sp.add_argument("--json", type=Path, default=None, help="write the figures here")
    sp.add_argument("--png", type=Path, default=None, help="write the per-cell ranges here")
    sp.set_defaults(func=run_spread)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output file of the command can be written: checked before the work."""
    for flag in ("json", "png", "md", "out"):
        writable_file(getattr(args, flag, None), f"--{flag}")


def run_list(args: argparse.Namespace) -> int:
    cells = _cells(args)
    table = Table(title=f"{len(cells)} cells")
    for col in ("cell", "points", "offsets", "steps", "fields", "compulsory MB", "tolerance"):
        table.add_column(col, justify="left" if col == "cell" else "right")
    for c in cells:
        table.add_row(c.id, str(c.shape.points), str(c.stencil.points), str(c.stencil.steps),
                      str(c.stencil.inputs), f"{c.compulsory_bytes / 1e6:.1f}",
                      f"{c.precision.tolerance:g}")
    console.print(table)
    return 0


@contextmanager
def _progress(total: int, what: str) -> Iterator[Any]:
    """A bar on a terminal; otherwise plain lines: the start, the latest status at least
    every 30 s, the end (cli/progress.py)."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as progress, \
            line_progress(err_console) as lines:
        task = progress.add_task(what, total=total)
        lines.step(f"{what}: {total} to do")

        def update(message: str, done: int, _total: int) -> None:
            progress.update(task, completed=done, description=f"{what} {message}")
            lines.update(f"{what}: {done}/{total} done, last {message}")
        yield update
        lines.step(f"{what}: finished")


def _say(message: str) -> None:
    err_console.print(escape(message), soft_wrap=True)


def run_check(args: argparse.Namespace) -> int:
    _check_outputs(args)
    cells = _cells(args)
    if args.compile_only:
        return _compile_only(args, cells)
    with _progress(len(cells), "check") as update, isolation(args) as iso:
        results = check_cells(cells, points=args.points, seed=args.seed,
                              include_naive=not args.no_naive, progress=update,
                              isolate=IsolatedCheck(iso, log=_say) if iso is not None else None)
    table = Table(title="oracle checks")
    for col in ("cell", "runner", "status", "error", "tolerance", "points", "seed"):
        table.add_column(col)
    for r in results:
        c = r.get("check") or {}
        err = c.get("error")
        table.add_row(r["cell"], r["name"], escape(r.get("status", "-") + (
            f": {r['reason']}" if r.get("reason") else "")),
            "-" if not c else ("inf" if err is None else f"{err:.2e}"),
            f"{c.get('tolerance', 0):g}", str(c.get("checked_points", "-")), str(c.get("seed")))
    console.print(table)
    if args.json:
        write_json_atomic(args.json, {"checks": results})
    if any(r.get("status") == "failed-oracle" for r in results):
        return 5
    return 0 if all(r.get("status") == "ok" for r in results) else 6


def _compile_only(args: argparse.Namespace, cells: list[Cell]) -> int:
    with _progress(len(cells) * (1 if args.no_naive else 2), "nvcc") as update:
        done = [0]

        def on_done(res: Any) -> None:
            done[0] += 1
            update(res.cell_id, done[0], 0)
        results = compile_only(cells, operator_for, arch=args.arch, nvcc=args.nvcc,
                               jobs=args.jobs, include_naive=not args.no_naive, on_done=on_done)
    failed = [r for r in results if not r.ok]
    for r in failed:
        err_console.print(f"[bold red]FAILED[/] {escape(r.cell_id)} {r.runner} "
                          f"{escape(r.key)}:\n{escape(r.log[:2000])}", soft_wrap=True)
    console.print(f"nvcc -arch={args.arch}: {len(results) - len(failed)}/{len(results)} "
                  f"compiled ({len(cells)} cells)")
    if args.json:
        write_json_atomic(args.json, {"compile_only": [r.to_json() for r in results]})
    return 6 if failed else 0


def _bench_cells(args: argparse.Namespace) -> list[Cell]:
    """The filters' cells, or ``--cell-ids``; with ``--changed-from``, only those whose table
    entry (design and parameters) differs between that table and the dispatch table."""
    cells = ([Cell.parse(c.strip()) for c in args.cell_ids.split(",") if c.strip()]
             if args.cell_ids else _cells(args))
    if args.changed_from is None:
        return cells
    from ..stencil.matrix import load_table, table_in_use

    if not args.changed_from.is_file():
        raise ConfigError(f"--changed-from {args.changed_from}: no such table",
                          hint="give the matrix.json from before the forge run")

    def entries(path: Path) -> dict[str, Any]:
        return {cid: (e.get("design"), e.get("params")) for cid, e in load_table(path).items()}

    old, new = entries(args.changed_from), entries(Path(args.table or table_in_use()))
    changed = [c for c in cells if old.get(c.id) != new.get(c.id)]
    if not changed:
        raise ConfigError(f"no cell's operator differs from {args.changed_from} "
                          f"({len(cells)} cells compared)",
                          hint="check --table and --changed-from, or leave --changed-from out")
    return changed


def run_bench(args: argparse.Namespace) -> int:
    _check_outputs(args)
    cells = _bench_cells(args)
    baselines = tuple(_split(args.baselines) or ())
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ConfigError(f"unknown baselines {unknown}", hint=f"choose from {BASELINES}")
    config = BenchConfig(baselines=baselines, warmup=args.warmup, repeat=args.repeat,
                         passes=args.passes, points=args.points, seed=args.seed,
                         table=_table(args))
    earlier = _earlier(args)
    from ..stencil.matrix import describe_table

    err_console.print(f"dispatch: {escape(describe_table(Path(config.table) if config.table else None))}",
                      soft_wrap=True)
    with _progress(len(cells), "bench") as update, isolation(args) as iso:
        results = bench(cells, config, progress=update, resume=earlier,
                        log=lambda msg: err_console.print(escape(msg), soft_wrap=True),
                        on_cell=(lambda res: write_json_atomic(args.json, res))
                        if args.json else None,
                        isolate=IsolatedBench(iso) if iso is not None else None)
    for table in report.rich_tables(results):
        console.print(table)
    if args.json:
        write_json_atomic(args.json, results)
    if args.md:
        write_bytes_atomic(args.md, report.markdown(results).encode())
    if args.png:
        report.chart(results, args.png)
    for p in (args.json, args.md, args.png):
        if p:
            console.print(f"wrote {escape(str(p))}")
    ours = [r for row in results["cells"] for r in row["runners"] if r["name"] == "ours"]
    if any(r.get("status") == "failed-oracle" for r in ours):
        return 5
    return 0 if all(r.get("status") == "ok" for r in ours) else 6


def _earlier(args: argparse.Namespace) -> dict[str, Any] | None:
    """The results to resume (``--resume``): the --json file if it exists."""
    if not args.resume:
        return None
    if not args.json:
        raise ConfigError("--resume goes on with the run in --json", hint="give --json FILE")
    if not args.json.exists():
        return None
    try:
        data = json.loads(args.json.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{args.json}: cannot resume from it ({exc})",
                          hint="write a new --json file, or remove this one") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{args.json}: not a bench results file", hint="write a new --json file")
    return data


def run_merge(args: argparse.Namespace) -> int:
    _check_outputs(args)
    doc, rows = latest.merged(args.inputs, drift_tol=args.drift, note=args.note,
                              by_date=args.by_date, table=args.table)
    latest.write(doc, rows, args.out, args.png)
    for line in latest.report_lines(doc):
        console.print(escape(line), soft_wrap=True)
    console.print(f"wrote {escape(str(args.out))}" + (f", {escape(str(args.png))}"
                                                       if args.png else ""))
    return 0


def run_spread(args: argparse.Namespace) -> int:
    _check_outputs(args)
    doc = spread.spread(args.inputs, goal=args.goal)
    for line in spread.report_lines(doc):
        console.print(escape(line), soft_wrap=True)
    if args.json:
        write_json_atomic(args.json, doc)
    if args.png:
        spread.chart(doc, args.png)
    for out in (args.json, args.png):
        if out:
            console.print(f"wrote {escape(str(out))}")
    return 0
