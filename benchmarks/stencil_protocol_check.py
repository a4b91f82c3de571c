"""The H200 check that the stencil figures survive the move of the forge's timing into the
harness (issue 31, item 1): the 60 memory-bound single-sweep cells of the merged matrix
(``docs/benchmarks/data/stencil-matrix-h200-latest-2026-12-02.json``: median 85.2% of copy)
benched through ``kernforge stencil bench --cell-ids ... --baselines ''`` (35 s a run), the
median % of copy printed per run, before and after.

    # anywhere (no GPU): the cells, whether the table still dispatches the merged operators,
    # the commands a run makes
    python benchmarks/stencil_protocol_check.py --dry-run
    # on the GPU: 3 runs of this tree; with --before, 3 runs of another tree too (its src/
    # first on PYTHONPATH), the two alternated run by run so drift hits both
    python benchmarks/stencil_protocol_check.py --runs 3 --before runs/before/src --out runs/pc
    # on the GPU: each operator compiled and launched as its cuda Variant by the backend
    # (stencil.variant, the path of apply_stencil and of a deployment), same protocol
    python benchmarks/stencil_protocol_check.py --runs 3 --as-variants --out runs/pc-var
    # anywhere: the report again from the run files
    python benchmarks/stencil_protocol_check.py --report runs/pc

The report gives per side the median % of copy of each run (and against the copy timed in the
operator's passes), the median of the run medians, the run-to-run range, and per cell the
median over runs of ``time(after) / time(before)``. "Within noise": the two sides' medians
differ by no more than the larger run-to-run range of a side (five runs of one tree spread
0.7 points, 84.5-85.2%, docs/benchmarks/stencil-h200.md) and the per-cell time ratios'
median lies within 1 +- 1%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs/benchmarks/data/stencil-matrix-h200-latest-2026-12-02.json"
PY = sys.executable


def cells_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The merged rows of the memory-bound single-sweep cells (the committed median's)."""
    return [r for r in data["cells"] if r.get("bound") == "memory" and not r.get("temporal")]


def preflight(rows: list[dict[str, Any]]) -> list[str]:
    """Cells whose dispatched operator is not the merged row's (their figures differ anyway)."""
    from kernforge.stencil import matrix as mx
    from kernforge.stencil.spec import Cell

    return [f"{r['cell']}: table {op.key}, merged {r['operator']}" for r in rows
            if (op := mx.operator_for(Cell.parse(r["cell"]))).key != r["operator"]]


def bench_command(ids: list[str], out: Path, variants: bool) -> list[str]:
    if variants:
        return [PY, str(Path(__file__).resolve()), "--_variant-run", str(out),
                "--_cells", ",".join(ids)]
    return [PY, "-m", "kernforge", "stencil", "bench", "--cell-ids", ",".join(ids),
            "--baselines", "", "--json", str(out)]


def plan(ids: list[str], out: Path, runs: int, before: Path | None,
         variants: bool) -> list[tuple[str, Path, list[str], dict[str, str]]]:
    """(side, file, command, environment) per run: before and after alternated."""
    steps = []
    for r in range(runs):
        sides = ["after"] if before is None else (["before", "after"] if r % 2 == 0
                                                  else ["after", "before"])
        for side in sides:
            env = {} if before is None or side == "after" else before_env(before)
            path = out / f"{side}-{r + 1}.json"
            steps.append((side, path, bench_command(ids, path, variants and side == "after"),
                          env))
    return steps


def before_env(before: Path) -> dict[str, str]:
    """The other tree first on PYTHONPATH, the rest kept (where the dependencies may be)."""
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(before.resolve()) + (os.pathsep + rest if rest else "")}


def imported_from(env: dict[str, str]) -> str:
    """Where a child process with ``env`` imports kernforge from."""
    return subprocess.run([PY, "-c", "import kernforge; print(kernforge.__file__)"],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _ours(row: dict[str, Any]) -> dict[str, Any]:
    return next((r for r in row["runners"] if r["name"] == "ours"), {})


def report(files: list[Path], committed: float | None = None) -> dict[str, Any]:
    """Per side (the file name's prefix), the runs' medians; per cell, after/before times."""
    sides: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(files):
        doc = json.loads(path.read_text())
        single = doc["summary"]["single_sweep"]
        times = {c["cell"]: _ours(c)["time_s"] for c in doc["cells"]
                 if _ours(c).get("status") == "ok"}
        sides.setdefault(path.name.split("-")[0], []).append(
            {"file": path.name, "median_pct_copy": single["median_pct_copy"],
             "median_pct_copy_paired": single.get("median_pct_copy_paired"),
             "cells": single["memory_bound_cells"], "times": times})
    out: dict[str, Any] = {"committed": committed, "sides": {}}
    for side, runs in sides.items():
        medians = [r["median_pct_copy"] for r in runs]
        out["sides"][side] = {"runs": [{k: v for k, v in r.items() if k != "times"}
                                       for r in runs],
                              "median": _median(medians), "range": max(medians) - min(medians)}
    if {"before", "after"} <= set(sides):
        per_cell = {}
        for cell in sides["after"][0]["times"]:
            a = [r["times"][cell] for r in sides["after"] if cell in r["times"]]
            b = [r["times"][cell] for r in sides["before"] if cell in r["times"]]
            if a and b:
                per_cell[cell] = _median(a) / _median(b)
        ratio = _median(list(per_cell.values())) if per_cell else None
        diff = out["sides"]["after"]["median"] - out["sides"]["before"]["median"]
        noise = max(out["sides"]["after"]["range"], out["sides"]["before"]["range"])
        out.update(per_cell_ratio=per_cell, median_time_ratio=ratio, difference=diff,
                   noise=noise, within_noise=abs(diff) <= noise and ratio is not None
                   and abs(ratio - 1.0) <= 0.01)
    return out


def print_report(r: dict[str, Any]) -> None:
    if r["committed"] is not None:
        print(f"committed (merged matrix): {r['committed']:.1f}% of copy")
    for side, s in r["sides"].items():
        for run in s["runs"]:
            paired = run["median_pct_copy_paired"]
            print(f"{side:7s} {run['file']:18s} {run['median_pct_copy']:6.2f}% of copy "
                  f"(paired {paired if paired is None else round(paired, 2)}) over "
                  f"{run['cells']} cells")
        print(f"{side:7s} median of runs {s['median']:.2f}%, range {s['range']:.2f} points")
    if "difference" in r:
        ratio = r["median_time_ratio"]
        print(f"after - before: {r['difference']:+.2f} points (noise {r['noise']:.2f}); "
              f"per-cell time after/before, median {ratio if ratio is None else round(ratio, 4)}"
              f": {'within noise' if r['within_noise'] else 'NOT within noise'}")


class VariantRunner:
    """A bench runner of an operator's cuda Variants (stencil.variant), each compiled and
    launched by ``backend`` on the cell's fields: the path of apply_stencil and deployments."""

    def __init__(self, backend: Any, op: Any, dcell: Any, name: str = "") -> None:
        from kernforge.stencil.variant import variants

        self.name, self.backend, self.dcell = name or op.design, backend, dcell
        self.launches = [(backend.compile(lv.variant), lv) for lv in variants(op)]
        for compiled, lv in self.launches:
            if lv.carveout >= 0:  # a function attribute, as the forge sets it
                compiled.handle.function.preferred_shared_memory_carveout = lv.carveout
            for role in lv.args:
                dcell.field(role)  # tmp allocated now, not in a timed run
        self.loaded = SimpleNamespace(info={lv.variant.source.entry: dict(c.info)
                                            for c, lv in self.launches})

    def run(self) -> None:
        for compiled, lv in self.launches:
            self.backend.launch(compiled, [self.dcell.fields[r] for r in lv.args])

    def output(self) -> Any:
        return self.dcell.fields["out"]


def _variant_run(out: Path, ids: list[str]) -> int:
    """One bench of ``ids`` in this process, each operator run as its cuda Variants."""
    from kernforge.backends import get_backend
    from kernforge.core.jsonio import write_json_atomic
    from kernforge.forge.bench import BenchConfig, bench
    from kernforge.forge.measure import GpuDevice
    from kernforge.stencil.spec import Cell

    class VariantDevice(GpuDevice):
        def operator_runner(self, op: Any, dcell: Any, name: str = "") -> Any:
            return VariantRunner(self.backend, op, dcell, name)

    device = VariantDevice(backend=get_backend("cuda"))
    cells = [Cell.parse(c) for c in ids]
    result = bench(cells, BenchConfig(baselines=()), device=device, log=print,
                   on_cell=lambda doc: write_json_atomic(out, doc))
    write_json_atomic(out, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DATA, help="the merged matrix (the cells)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--before", type=Path, default=None, help="src/ of the tree to compare with")
    p.add_argument("--as-variants", action="store_true",
                   help="time each operator as its cuda Variants (this tree's side)")
    p.add_argument("--out", type=Path, default=Path("runs/protocol-check"))
    p.add_argument("--dry-run", action="store_true", help="print what would run (no GPU)")
    p.add_argument("--report", type=Path, default=None, help="report the files of a run dir")
    p.add_argument("--_variant-run", dest="variant_run", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--_cells", dest="cells", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.variant_run is not None:
        return _variant_run(args.variant_run, args.cells.split(","))
    data = json.loads(args.data.read_text())
    committed = data["summary"]["single_sweep"]["median_pct_copy"]
    if args.report is not None:
        r = report(list(args.report.glob("*-*.json")), committed)
        print_report(r)
        return 0 if r.get("within_noise", True) else 1
    args.out = args.out.resolve()  # the runs' working directory is the repository's
    rows = cells_of(data)
    ids = [r["cell"] for r in rows]
    print(f"{len(ids)} memory-bound single-sweep cells; committed median {committed:.1f}% "
          f"of copy ({args.data.name})")
    for line in preflight(rows):
        print(f"  operator changed since the merge: {line}")
    steps = plan(ids, args.out, args.runs, args.before, args.as_variants)
    for side, path, cmd, env in steps:
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"[{side}] {shown + ' ' if shown else ''}{' '.join(cmd[:4])} ... -> {path}")
    if args.dry_run:
        return 0
    if args.before is not None:
        where = imported_from(before_env(args.before))
        if not where.startswith(str(args.before.resolve())):
            print(f"--before {args.before}: the child imports kernforge from {where}; give the "
                  f"src/ directory of the other tree (git archive <commit> src | tar -x -C DIR)")
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for side, path, cmd, env in steps:
        rc = subprocess.call(cmd, env={**os.environ, **env}, cwd=ROOT)
        if rc != 0:
            print(f"[{side}] {path.name}: exit status {rc}")
    r = report([path for _, path, _, _ in steps if path.exists()], committed)
    print_report(r)
    (args.out / "report.json").write_text(json.dumps(r, indent=1))
    return 0 if r.get("within_noise", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
