"""``kernforge export RUN_DIR [-o SPEC] [--min-speedup X]``: a deployment spec from tuning results."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core import ConfigError, LaunchConfig, Recording, Variant
from ..core.fmt import fmt_time
from ..deploy import DeployEntry, entry_from_recording, write_spec
from ..record import load_recording
from .output import console, err_console

RESULT_NAME = "result.json"
RESULT_FORMAT = "kernforge-tune-result"
RESULT_VERSIONS = (1,)
ACCEPTED_VERDICTS = ("accepted", "downgraded")  # replay.validate: the winner passed every gate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a deployment spec from a tuning run",
                       description="Collect every tuning result (RUN_DIR/**/result.json) with "
                                   "status OK, validated (every integrity gate passed), whose interleaved speedup is above "
                                   "--min-speedup, and write a deployment spec: per kernel, "
                                   "device and problem, the tuned variant and its evidence. "
                                   "Run an application with it: kernforge run --deploy SPEC "
                                   "-- python app.py, or KERNFORGE_DEPLOY=SPEC.")
    p.add_argument("run_dir", help="a tuning run directory")
    p.add_argument("-o", "--out", default=None, help="spec file (default RUN_DIR/deploy.json)")
    p.add_argument("--min-speedup", type=float, default=1.0, metavar="X",
                   help="export results whose speedup is strictly above X (default 1.0)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Exported:
    result: Path
    recording: Recording
    entry: DeployEntry


def _load_result(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable tuning result ({exc})",
                          hint="re-run the tuning, or remove the damaged file") from None
    if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
        raise ConfigError(f"{path}: not a kernforge tuning result (format "
                          f"{doc.get('format') if isinstance(doc, dict) else None!r})",
                          hint="point at a run directory written by kernforge tune")
    if doc.get("schema_version") not in RESULT_VERSIONS:
        raise ConfigError(f"{path}: unknown tuning result schema_version "
                          f"{doc.get('schema_version')!r}",
                          hint="upgrade kernforge (pip install -U kernforge)")
    return doc


def variant_of(recording: Recording, spec: Mapping[str, Any]) -> Variant:
    """The recorded variant with a result's ``best.variant`` applied (``code`` null = the
    recorded code)."""
    launch = LaunchConfig.from_json(spec["launch"]) if spec.get("launch") else None
    source = recording.source.with_code(spec["code"]) if spec.get("code") else None
    return recording.variant.with_(options=spec.get("options"), defines=spec.get("defines"),
                                   launch=launch, source=source,
                                   constants=spec.get("constants"))


def interleaved_times(doc: Mapping[str, Any]) -> tuple[float, float]:
    """Baseline and tuned seconds of the interleaved measurement the speedup comes from (its
    medians, so baseline/tuned agrees with the speedup), else the result's median fields."""
    ab = doc.get("interleaved")
    if isinstance(ab, Mapping) and ab.get("median_a") and ab.get("median_b"):
        return float(ab["median_a"]), float(ab["median_b"])
    return float(doc["baseline_median_s"]), float(doc["best_median_s"])


def _entry(path: Path, doc: Mapping[str, Any]) -> Exported:
    rec_path = Path(doc["recording"])
    recording = load_recording(rec_path if rec_path.is_absolute() else path.parent / rec_path)
    ci = doc.get("speedup_ci")
    baseline_s, tuned_s = interleaved_times(doc)
    entry = entry_from_recording(
        recording, variant_of(recording, doc["best"]["variant"]),
        baseline_s=baseline_s, tuned_s=tuned_s,
        speedup=float(doc["speedup"]), speedup_ci=(float(ci[0]), float(ci[1])) if ci else None)
    return Exported(path, recording, entry)


def collect(run_dir: Path, min_speedup: float) -> tuple[list[Exported], list[str]]:
    """The results to export (one per kernel, device and problem: the fastest) and why the
    others were not."""
    paths = sorted(run_dir.rglob(RESULT_NAME))
    if not paths:
        raise ConfigError(f"no tuning results ({RESULT_NAME}) under {run_dir}",
                          hint="run kernforge tune first, then export its run directory")
    best: dict[str, Exported] = {}
    skipped: list[str] = []
    for path in paths:
        doc = _load_result(path)
        speedup = doc.get("speedup")
        validation = doc.get("validation")
        verdict = validation.get("verdict") if isinstance(validation, dict) else None
        if doc.get("status") != "OK":
            skipped.append(f"{path}: status {doc.get('status')}")
        elif verdict not in ACCEPTED_VERDICTS:
            skipped.append(f"{path}: not validated (validation verdict {verdict}); "
                           f"re-run the tuning with this kernforge")
        elif not isinstance(speedup, (int, float)) or not speedup > min_speedup:
            skipped.append(f"{path}: speedup {speedup} is not above {min_speedup:g}")
        else:
            try:
                ex = _entry(path, doc)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise ConfigError(f"{path}: malformed tuning result ({type(exc).__name__}: "
                                  f"{exc})", hint="re-run the tuning") from None
            key = ex.entry.match_key()
            if key in best and best[key].entry.evidence.speedup >= ex.entry.evidence.speedup:
                skipped.append(f"{path}: same kernel and problem as {best[key].result}, slower")
                continue
            if key in best:
                skipped.append(f"{best[key].result}: same kernel and problem as {path}, slower")
            best[key] = ex
    return list(best.values()), skipped


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
    exported, skipped = collect(run_dir, args.min_speedup)
    for line in skipped:
        err_console.print(f"skipped {escape(line)}", soft_wrap=True)
    if not exported:
        err_console.print(f"[bold red]nothing to export:[/] no result under {escape(str(run_dir))}"
                          f" is OK with a speedup above {args.min_speedup:g}")
        return 1
    out = write_spec(Path(args.out) if args.out else run_dir / "deploy.json",
                     [ex.entry for ex in exported])
    table = Table(title=f"{len(exported)} tuned kernel launch(es) exported to {out}")
    for col in ("kernel", "unit", "speedup", "95% CI", "baseline", "tuned", "variant"):
        table.add_column(col, no_wrap=col in ("kernel", "speedup"))
    for ex in exported:
        ev = ex.entry.evidence
        ci = f"{ev.speedup_ci[0]:.2f}-{ev.speedup_ci[1]:.2f}" if ev.speedup_ci else "-"
        table.add_row(escape(ex.entry.kernel.label), escape(ex.recording.name),
                      f"{ev.speedup:.2f}x", ci, fmt_time(ev.baseline_s), fmt_time(ev.tuned_s),
                      escape(describe(ex.recording, ex.entry)))
    console.print(table)
    return 0
