"""``kernforge stencil bench``: every cell's operator and baselines, checked and timed together.

Per cell, in one process and on one device: the copy bandwidth of a grid-sized copy; then each
runner (our operator first, then the baselines) gets fresh random inputs (its own seed), runs
once and is checked by the oracle; a runner that passes is timed (warm-up, then ``repeat``
timed runs, median); a baseline that fails the gate is reported and not counted; a baseline
that cannot be built (library missing, unsupported case) is skipped with its reason. Our
operator is then compared with the fastest passing baseline in interleaved passes: the speedup
is the median of the per-pass ratios. Our operator is also timed interleaved with a copy of
the grid's size (at most 2 GiB; the run's faster copy method, the same passes):
``copy_paired`` holds both medians and the % of copy they give, a reference taken beside the
operator rather than once per size before the cell (the copy's own spread between
measurements was 1-4.5% on the H200).
Results are plain JSON (:func:`bench` returns it; :mod:`.report` prints and charts it).

Baselines: ``naive`` is the one-thread-per-point kernel (:mod:`kernforge.stencil.kernels.naive`);
every other name is asked of ``kernforge.stencil.baselines.make_runner(name, cell, fields)``
when the package defines it, else of the factory in :data:`FACTORIES` (``torch``:
``torch_conv.TorchConvRunner``, ``halide``: ``halide_hand.build``, ``halide_auto``:
``halide_auto.build``), called as ``factory(cell, fields)``; ``fields`` are the cell's arrays by
role (``in``, ``coef``, ``out``; refreshed in place between checks). A factory returns a
:class:`~kernforge.forge.measure.Runner` or raises (then the baseline is skipped, the reason
logged).
"""

from __future__ import annotations

import functools
import importlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..core import KernforgeError
from ..harness.stats import by_precision, geomean, median
from ..stencil.kernels import naive
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from .gpustate import gpu_state
from .measure import Device, DeviceCell, Runner
from .resume import resumable_seed, resumed_fields

SCHEMA = "kernforge.stencil.bench/1"
BASELINES = ("naive", "torch", "halide", "halide_auto")
Log = Callable[[str], None]
Progress = Callable[[str, int, int], None]  # message, cells done, cells in all


@dataclass(frozen=True)
class BenchConfig:
    baselines: tuple[str, ...] = BASELINES
    warmup: int = 3
    repeat: int = 10
    passes: int = 5  # interleaved A/B passes against the best baseline (raised to 8: looks)
    per_pass: int = 3
    points: int = 4096  # random points per sampled check
    seed: int | None = None  # None: drawn at random when the run starts (then recorded)
    table: str | None = None  # a dispatch table (matrix.json) other than the committed one


def operator_for(cell: Cell, table: str | None = None) -> Operator:
    """Our operator: the dispatch of the table in use (the user's adopted one, else the
    packaged one), or of the table at ``table``."""
    from ..stencil import matrix as mx

    path = Path(table) if table else mx.table_in_use()
    mtime = path.stat().st_mtime_ns if path.exists() else 0
    return mx.operator_for(cell, _table(str(path), mtime))


@functools.lru_cache(maxsize=4)
def _table(path: str, mtime: int) -> dict[str, dict[str, Any]]:
    """A dispatch table, read once per bench run (keyed by its modification time)."""
    from ..stencil import matrix as mx

    return mx.load_table(Path(path))


# name -> (module under kernforge.stencil.baselines, factory(cell, fields) -> Runner), used
# when the package has no make_runner of its own
FACTORIES = {"torch": ("torch_conv", "TorchConvRunner"), "halide": ("halide_hand", "build"),
             "halide_auto": ("halide_auto", "build")}


def baseline_runner(name: str, cell: Cell, dcell: DeviceCell, device: Device) -> Runner:
    """A baseline's runner on ``dcell``'s fields; raises when it cannot be built here."""
    if name == "naive":
        return device.operator_runner(naive.generate(cell), dcell, "naive")
    package = "kernforge.stencil.baselines"
    try:
        make = getattr(importlib.import_module(package), "make_runner", None)
    except ModuleNotFoundError:
        make = None
    if make is not None:
        made: Runner = make(name, cell, dcell.fields)
        return made
    if name not in FACTORIES:
        raise KernforgeError(f"unknown baseline {name!r}")
    module, factory = FACTORIES[name]
    runner: Runner = getattr(importlib.import_module(f"{package}.{module}"), factory)(
        cell, dcell.fields)
    return runner


FUSED = "fused"  # the runner name of the temporal-blocking design on multi-step cells
# a library baseline's build facts kept in its entry (Halide: which pipeline ran, and why)
BUILT_KEYS = ("target", "schedule", "autoscheduler", "run_time_extents", "fixed_extents_error")
SLOW_S = 0.05  # a runner slower than this per application is timed 3 times, not `repeat`


def _seed(config: BenchConfig, cell_index: int, runner_index: int) -> int:
    """Every check its own seed: the run's seed, the cell and the runner."""
    return int(config.seed or 0) * 1_000_003 + cell_index * 101 + runner_index


def _resolved(config: BenchConfig) -> BenchConfig:
    """The config with a fresh random seed when none was given (recorded in the results)."""
    return config if config.seed is not None else replace(config,
                                                          seed=secrets.randbelow(1 << 31))


def _rates(cell: Cell, seconds: float, copy_bps: float) -> dict[str, float]:
    return {"time_s": seconds, "gcells_per_s": cell.updates / seconds / 1e9,
            "gb_per_s": cell.compulsory_bytes / seconds / 1e9,
            "pct_copy": 100.0 * cell.compulsory_bytes / seconds / copy_bps}


def checked_run(device: Device, dcell: DeviceCell, runner: Runner, seed: int,
                points: int) -> Any:
    """Fresh inputs from ``seed``, one application, the oracle's verdict (a CheckResult)."""
    dcell.refresh(seed)
    if getattr(runner, "reload_inputs", False):  # a runner on its own copy (Halide)
        runner.reload()  # type: ignore[attr-defined]
    runner.run()
    device.synchronize()
    return dcell.check(runner.output(), points=points)


def _run_one(device: Device, cell: Cell, dcell: DeviceCell, runner: Runner, seed: int,
             config: BenchConfig, copy_bps: float) -> dict[str, Any]:
    """Check (fresh inputs) then time one runner; failures become data."""
    entry: dict[str, Any] = {"name": runner.name}
    try:
        res = checked_run(device, dcell, runner, seed, config.points)
        entry["check"] = res.to_json()
        if not res.ok:
            entry.update(status="failed-oracle",
                         reason=f"error {res.error:.3g} > {res.tolerance:g}" if res.error
                         > res.tolerance else "boundary touched")
            return entry
        first = device.once(runner)  # warm: the check ran it once already
        if first > SLOW_S:  # a slow baseline: 3 runs are precise enough and cost seconds
            samples = [first] + device.measure(runner, warmup=0, repeat=2)
            entry["reduced_repeat"] = True
        else:
            samples = device.measure(runner, warmup=config.warmup, repeat=config.repeat)
    except KernforgeError as exc:
        entry.update(status="error", reason=f"{type(exc).__name__}: {exc.message}")
        return entry
    except Exception as exc:  # noqa: BLE001 - a baseline library's own failure is data
        entry.update(status="error", reason=f"{type(exc).__name__}: {exc}")
        return entry
    entry.update(status="ok", samples=samples, **_rates(cell, median(samples), copy_bps))
    return entry


def _ours(device: Device, cell: Cell, dcell: DeviceCell,
          table: str | None = None) -> tuple[Runner | None, dict[str, Any]]:
    try:
        op = operator_for(cell) if table is None else operator_for(cell, table)
        info = {"design": op.design, "key": op.key, "launches": len(op.launches)}
        return device.operator_runner(op, dcell, "ours"), info
    except Exception as exc:  # noqa: BLE001 - a generator or compile failure is data
        return None, {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}


def _fused(device: Device, cell: Cell,
           dcell: DeviceCell) -> tuple[str, Runner | None, dict[str, Any]]:
    """The temporal-blocking design (all steps fused) for a multi-step cell whose dispatched
    operator is something else (chained sweeps won the forge): measured and reported beside
    it, never counted as a baseline."""
    from ..stencil import matrix as mx

    try:
        op = mx.build("temporal", cell, mx.defaults("temporal", cell))
        if op is None:
            return FUSED, None, {"status": "skipped", "reason": "no temporal operator fits"}
        steps = cell.stencil.steps // len(op.launches)
        info = {"design": op.design, "key": op.key, "launches": len(op.launches),
                "fused_steps": steps}
        return FUSED, device.operator_runner(op, dcell, FUSED), info
    except Exception as exc:  # noqa: BLE001 - a generator or compile failure is data
        return FUSED, None, {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}


def _kind(name: str) -> str:
    return {"ours": "ours", FUSED: "ours-fused"}.get(name, "baseline")


def bench_cell(device: Device, cell: Cell, index: int, config: BenchConfig, log: Log,
               skip: dict[str, dict[str, Any]] | None = None,
               on_stage: Log | None = None) -> dict[str, Any]:
    """One cell's row; ``skip``: runners not run, with their entry (one that killed its worker,
    :mod:`.bench_isolated`); ``on_stage``: told the runner about to be built or run."""
    skip, stage = skip or {}, on_stage or (lambda _name: None)
    before = gpu_state()
    copy = device.copy_bandwidth(cell.shape.points * cell.precision.itemsize)
    dcell = device.allocate(cell, _seed(config, index, 0))
    stage("ours")
    ours, info = (None, skip["ours"]) if "ours" in skip else \
        _ours(device, cell, dcell, config.table)
    runners: list[tuple[str, Runner | None, dict[str, Any]]] = [("ours", ours, info)]
    if cell.stencil.temporal and info.get("design") != "temporal":
        stage(FUSED)
        runners.append((FUSED, None, skip[FUSED]) if FUSED in skip
                       else _fused(device, cell, dcell))  # temporal blocking, beside
    for name in config.baselines:
        try:
            stage(name)
            runners.append((name, None, skip[name]) if name in skip
                           else (name, baseline_runner(name, cell, dcell, device), {}))
        except Exception as exc:  # noqa: BLE001 - missing library, unsupported case: skipped
            reason = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
            log(f"{cell.id}: baseline {name} skipped: {reason}")
            runners.append((name, None, {"status": "skipped", "reason": reason}))
    results: list[dict[str, Any]] = []
    for i, (name, runner, extra) in enumerate(runners):
        entry = {"name": name, **extra, "kind": _kind(name)}
        built = getattr(runner, "info", None)  # how a library baseline was built (Halide)
        if isinstance(built, dict):
            entry["built"] = {k: built[k][:300] if isinstance(built[k], str) else built[k]
                              for k in BUILT_KEYS if k in built}
        loaded = getattr(getattr(runner, "loaded", None), "info", None)
        if isinstance(loaded, dict):  # our kernels and naive: registers, spills per entry
            entry["built"] = {"kernels": loaded}
        if runner is not None and name not in skip:
            stage(name)
            entry.update(_run_one(device, cell, dcell, runner, _seed(config, index, i),
                                  config, copy.bytes_per_s), name=name)
        if entry.get("status") not in ("ok", "skipped"):
            log(f"{cell.id}: {name}: {entry.get('status')}: {entry.get('reason')}")
        results.append(entry)
    row: dict[str, Any] = {"cell": cell.id, "stencil": cell.stencil.name, "shape": cell.shape.name,
           "precision": cell.precision.value, "steps": cell.stencil.steps,
           "temporal": cell.stencil.temporal, "updates": cell.updates,
           "compulsory_bytes": cell.compulsory_bytes, "copy": copy.to_json(),
           "runners": results, "gpu_before": before, "gpu_after": gpu_state()}
    roof = _roofline(device, cell, copy.bytes_per_s)
    row["roofline"] = roof
    if roof:
        for r in results:
            if r.get("status") == "ok":
                r["pct_peak_flops"] = 100.0 * cell.flops / r["time_s"] / roof["peak"]
    stage("compare")
    row.update(_speedup(device, runners, results, config, index))
    del runners  # the baselines' memory back before the paired copy allocates its own
    if ours is not None and results[0].get("status") == "ok":
        row["copy_paired"] = _paired_copy(device, cell, copy.nbytes, copy.method, ours,
                                          _seed(config, index, 99), config)
    del ours, dcell
    device.release()
    return row


def _roofline(device: Device, cell: Cell, copy_bps: float) -> dict[str, Any] | None:
    """The cell's roofline bound from the FMA peak measured on this device (GPU only)."""
    from .measure import GpuDevice

    if not isinstance(device, GpuDevice) or not hasattr(device, "backend"):
        return None  # a stand-in device (tests) has no arithmetic to measure
    from .peak import peak_flops, roofline

    peak = peak_flops(device, cell.precision)
    return {"peak": peak.flops_per_s, "peak_ctype": peak.ctype,
            **roofline(cell, peak.flops_per_s, copy_bps)}


def _speedup(device: Device, runners: Sequence[tuple[str, Runner | None, dict[str, Any]]],
             results: list[dict[str, Any]], config: BenchConfig,
             index: int) -> dict[str, Any]:
    """Ours against the fastest passing baseline, interleaved."""
    ok = {r["name"]: r for r in results if r.get("status") == "ok"}
    passing = [n for n in ok if ok[n].get("kind", _kind(n)) == "baseline"]
    if not passing:
        return {"best_baseline": None, "speedup": None, "ab": None}
    best = min(passing, key=lambda n: ok[n]["time_s"])
    if "ours" not in ok:
        return {"best_baseline": best, "speedup": None, "ab": None}
    by_name = {n: r for n, r, _ in runners if r is not None}
    try:
        ab = device.compare(by_name[best], by_name["ours"], passes=config.passes,
                            per_pass=config.per_pass, seed=int(config.seed or 0) + index)
    except KernforgeError as exc:
        return {"best_baseline": best, "speedup": None, "ab": None, "ab_error": exc.message}
    return {"best_baseline": best, "speedup": ab.speedup,
            "ab": {k: v for k, v in ab.to_json().items() if not k.startswith("samples")}}


def _paired_copy(device: Device, cell: Cell, nbytes: int, method: str, ours: Runner,
                 seed: int, config: BenchConfig) -> dict[str, Any]:
    """Ours and a copy of ``nbytes`` (the run's copy size: the grid's, at most 2 GiB) timed in
    the same interleaved passes; a failure (out of memory, ...) is recorded, not raised."""
    try:
        copier = device.copy_runner(nbytes, method)
        ab = device.compare(copier, ours, passes=config.passes, per_pass=config.per_pass,
                            seed=seed)
    except Exception as exc:  # noqa: BLE001 - failures are data
        return {"error": f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"}
    moved = 2 * int(getattr(copier, "nbytes", nbytes))
    return {"method": method, "nbytes": moved // 2, "copy_s": ab.median_a, "ours_s": ab.median_b,
            "pct_copy": 100.0 * cell.compulsory_bytes / ab.median_b / (moved / ab.median_a)}


def summary(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means of the speedup over the best passing baseline, split by precision
    (single-sweep and temporal cells apart), and how many cells passed."""
    out: dict[str, Any] = {"cells": len(cells)}
    for label, temporal in (("single_sweep", False), ("temporal", True)):
        group = [c for c in cells if c["temporal"] == temporal]
        pairs = [(c["precision"], float(c["speedup"])) for c in group if c.get("speedup")]
        ours_ok = sum(1 for c in group if _ours_entry(c).get("status") == "ok")
        mem = [c for c in group if memory_bound(c)]
        pct = [_ours_entry(c)["pct_copy"] for c in mem]
        paired = [c["copy_paired"]["pct_copy"] for c in mem
                  if (c.get("copy_paired") or {}).get("pct_copy")]
        out[label] = {"cells": len(group), "ours_passing": ours_ok,
                      "speedup_by_precision": by_precision(pairs) if pairs else {},
                      "geomean_speedup": geomean([v for _, v in pairs]) if pairs else None,
                      "median_pct_copy": median(pct) if pct else None,  # memory-bound cells
                      "memory_bound_cells": len(pct),
                      # the same median against the copy timed in the operator's passes, over
                      # the memory-bound rows that have it (older bench files: none)
                      "median_pct_copy_paired": median(paired) if paired else None,
                      "paired_cells": len(paired)}
    return out


def memory_bound(cell_row: dict[str, Any]) -> bool:
    """Our operator passed in this row and the cell is memory-bound (rows without a roofline,
    from before it was recorded, count as memory-bound): the cells of the % of copy median."""
    return (_ours_entry(cell_row).get("status") == "ok"
            and (cell_row.get("roofline") or {}).get("bound", "memory") == "memory")


def _ours_entry(cell_row: dict[str, Any]) -> dict[str, Any]:
    return next((r for r in cell_row["runners"] if r["name"] == "ours"), {})


def bench(cells: Sequence[Cell], config: BenchConfig | None = None, *,
          device: Device | None = None, log: Log | None = None,
          progress: Progress | None = None,
          on_cell: Callable[[dict[str, Any]], object] | None = None,
          resume: dict[str, Any] | None = None, isolate: Any = None) -> dict[str, Any]:
    """Run the bench over ``cells`` (see the module docstring); returns the results JSON.
    ``isolate``: cells benched in workers instead (:class:`.bench_isolated.IsolatedBench`).

    ``on_cell`` receives the results so far after every cell (a caller writes them, so a run
    stopped by a time limit keeps every finished cell). ``resume``: the results of an earlier,
    unfinished run with the same settings on the same kind of device; its cells are kept and
    not run again, and its seed is reused, so every cell gets the inputs it would have had in
    one uninterrupted run."""
    config = config or BenchConfig()
    if device is None and isolate is None:
        from .measure import GpuDevice
        device = GpuDevice()
    ident = isolate.identity() if isolate is not None else device.identity()  # type: ignore[union-attr]
    done: dict[str, dict[str, Any]] = {}
    if resume is not None:  # before a seed is drawn: the earlier run's is reused
        seed = resumable_seed(resume, asdict(config), SCHEMA, ident)
        config = replace(config, seed=seed)
        done = {r["cell"]: r for r in resume["cells"]}
    config = _resolved(config)
    log = log or (lambda _msg: None)
    started = time.time()
    rows: list[dict[str, Any]] = []

    def results() -> dict[str, Any]:
        out = {"schema": SCHEMA,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
               "seconds": time.time() - started, "device": ident,
               "config": asdict(config), "cells": rows, "summary": summary(rows)}
        return out if resume is None else {**out, **resumed_fields(resume, out)}

    for i, cell in enumerate(cells):
        if progress:
            progress(cell.id, i, len(cells))
        if cell.id in done:  # finished by the run being resumed
            rows.append(done[cell.id])
            continue
        t0 = time.time()
        rows.append(isolate.cell(cell, i, config, log) if isolate is not None
                    else bench_cell(device, cell, i, config, log))  # type: ignore[arg-type]
        rows[-1]["bench_seconds"] = round(time.time() - t0, 2)
        if on_cell:
            on_cell(results())
    if progress:
        progress("done", len(cells), len(cells))
    return results()
