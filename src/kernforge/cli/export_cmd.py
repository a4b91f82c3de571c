"""``kernforge export RUN_DIR [-o SPEC] [--min-speedup X]``: a deployment spec from tuning results."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import ConfigError, Recording
from ..core.fmt import fmt_time
from ..deploy import DeployEntry
from ..deploy.gate import NOISE_BAND
from ..harness.verdict import ci_label
from ..pipeline.units import ExportOutcome, export_units
from .checks import float_range, writable_file
from .output import console, err_console, notes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a deployment spec from a tuning run",
                       description="Collect every tuning result (RUN_DIR/**/result.json) "
                                   "that is signed and unaltered, with status OK, validated "
                                   "(every integrity gate passed), measured on an idle device "
                                   "and faster (the speed verdict: the interleaved "
                                   "speedup's distribution-free interval (99% over "
                                   "its looks) above 1 + "
                                   "--noise-band, runs not spread by load) and above "
                                   "--min-speedup, and write a deployment spec: per kernel, "
                                   "device and problem, the tuned variant and its evidence. "
                                   "Run an application with it: kernforge run --deploy SPEC "
                                   "-- python app.py, or KERNFORGE_DEPLOY=SPEC.")
    p.add_argument("run_dir", help="a tuning run directory")
    p.add_argument("-o", "--out", default=None, help="spec file (default RUN_DIR/deploy.json)")
    p.add_argument("--min-speedup", type=float_range(0.0), default=1.0, metavar="X",
                   help="export results whose speedup is strictly above X (default 1.0)")
    p.add_argument("--noise-band", type=float_range(0.0, 1.0), default=NOISE_BAND,
                   metavar="B", help="a result counts when the lower end of its interleaved "
                                     "speedup's interval (99%% over its looks) is "
                                     "above 1 + B (default "
                                     f"{NOISE_BAND:g})")
    p.set_defaults(func=run)


def describe(recording: Recording, entry: DeployEntry) -> str:
    """What the tuned variant changes, e.g. ``opt_level=O3 TILE_J=32 block=(64, 4, 1)``."""
    v = entry.variant
    parts = [f"{k}={val}" for k, val in sorted(v.options.items())
             if recording.options.get(k) != val]
    recorded_defines = dict(recording.defines)
    parts += [f"-D{k}={val}" for k, val in sorted(v.defines.items())
              if recorded_defines.get(k) != val]
    parts += [f"const {k}={val}" for k, val in sorted(v.constants.items())]
    launch, was = v.launch, recording.launch
    for name in ("grid", "block", "shared_mem", "threads"):
        if getattr(launch, name) != getattr(was, name):
            parts.append(f"{name}={getattr(launch, name)}")
    if v.code is not None:
        parts.append("new code")
    return " ".join(parts) or "(the recorded variant)"




def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory",
                          hint="give the directory of a tuning run")
    writable_file(args.out, "-o/--out")
    done = export_units(run_dir, Path(args.out) if args.out else None,
                        min_speedup=args.min_speedup, band=args.noise_band, notes=notes())
    if done.native:
        return _native(done)
    if done.also is not None:  # a run of both kinds: each kind's spec
        status = _recordings(done, run_dir, args.min_speedup)
        return min(status, _native(done.also))
    return _recordings(done, run_dir, args.min_speedup)


def _recordings(done: ExportOutcome, run_dir: Path, min_speedup: float) -> int:
    if done.spec is None:
        err_console.print(f"[bold red]nothing to export:[/] no result under {escape(str(run_dir))}"
                          f" is signed, OK, validated and faster (the speed verdict) with a "
                          f"speedup above {min_speedup:g} (the reasons are above)")
        return 1
    table = Table(title=f"{len(done.exported)} tuned kernel launch(es) exported to {done.spec}")
    # the intervals' confidence in the header when the rows share one (they do: one protocol)
    confs = {ex.confidence for ex in done.exported}
    label = ci_label(confs.pop() if len(confs) == 1 else None)
    for col in ("kernel", "unit", "speedup", label, "baseline", "tuned", "variant"):
        table.add_column(col, no_wrap=col in ("kernel", "speedup"))
    for ex in done.exported:
        ev = ex.entry.evidence
        ci = f"{ev.speedup_ci[0]:.2f}-{ev.speedup_ci[1]:.2f}" if ev.speedup_ci else "-"
        table.add_row(escape(ex.entry.kernel.label), escape(ex.recording.name),
                      f"{ev.speedup:.2f}x", ci, fmt_time(ev.baseline_s), fmt_time(ev.tuned_s),
                      escape(describe(ex.recording, ex.entry)))
    console.print(table)
    return 0


def _native(done: ExportOutcome) -> int:
    if done.spec is None:
        err_console.print("[bold red]nothing to export:[/] no native result is a significant, "
                          "verified win (the reasons are above)")
        return 1
    for line in done.merges:
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"{done.entries} native deployment entr{'y' if done.entries == 1 else 'ies'} "
                  f"({done.launches} recorded launch(es)) exported to {done.spec}", markup=False)
    return 0
