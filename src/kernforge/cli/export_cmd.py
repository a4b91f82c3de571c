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

from ..core import ConfigError, LaunchConfig, Recording, RecordingError, Variant
from ..core.fmt import fmt_time
from ..core.jsonio import signature_ok
from ..deploy import DeployEntry, entry_from_recording, write_spec
from ..deploy.gate import NOISE_BAND, idle_of, refusal, speed_of
from ..record import load_recording
from . import damaged, native_deploy_cmd
from .checks import float_range, writable_file
from .output import console, err_console

RESULT_NAME = "result.json"
RESULT_FORMAT = "kernforge-tune-result"
RESULT_VERSIONS = (1,)
ACCEPTED_VERDICTS = ("accepted", "downgraded")  # replay.validate: the winner passed every gate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a deployment spec from a tuning run",
                       description="Collect every tuning result (RUN_DIR/**/result.json) "
                                   "that is signed and unaltered, with status OK, validated "
                                   "(every integrity gate passed), measured on an idle device "
                                   "and faster (the speed verdict: the interleaved "
                                   "speedup's distribution-free 95% CI above 1 + "
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
                                     "speedup's 95%% CI is above 1 + B (default "
                                     f"{NOISE_BAND:g})")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Exported:
    result: Path
    recording: Recording
    entry: DeployEntry


def _load_result(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
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


def _entry(path: Path, doc: Mapping[str, Any], idle: bool | None) -> Exported:
    rec_path = Path(doc["recording"])
    recording = load_recording(rec_path if rec_path.is_absolute() else path.parent / rec_path,
                               verify=True)
    ci = doc.get("speedup_ci")
    baseline_s, tuned_s = interleaved_times(doc)
    entry = entry_from_recording(
        recording, variant_of(recording, doc["best"]["variant"]),
        baseline_s=baseline_s, tuned_s=tuned_s,
        speedup=float(doc["speedup"]), speedup_ci=(float(ci[0]), float(ci[1])) if ci else None,
        verified=True, idle=idle)
    return Exported(path, recording, entry)


def why_not(doc: dict[str, Any], min_speedup: float, band: float) -> str | None:
    """Why a result is not exported (None: it is): unsigned or altered, not OK, not
    validated, its speed verdict not "faster" (:mod:`kernforge.deploy.gate`), or below
    ``min_speedup``."""
    signed = signature_ok(doc)
    if signed is None:
        return "not signed (written by an older kernforge): re-run the tuning"
    if not signed:
        return ("altered after it was written (checksum mismatch): re-run the tuning; do not "
                "edit results by hand")
    speedup = doc.get("speedup")
    validation = doc.get("validation")
    verdict = validation.get("verdict") if isinstance(validation, dict) else None
    speed = speed_of(validation)
    if doc.get("status") == "INCONCLUSIVE" and speed is not None:
        return speed.reason  # neither a win nor a rejection: the verdict says what to do
    if doc.get("status") != "OK":
        speed = speed_of(validation)
        if doc.get("status") == "INCONCLUSIVE" and speed is not None:
            return speed.reason  # why, and what to do (measure again on an idle machine)
        return f"status {doc.get('status')}"
    if validation is None and "interleaved" in doc and doc["interleaved"] is None:
        return "the recorded configuration stayed the best: nothing to deploy"
    if verdict not in ACCEPTED_VERDICTS:
        return (f"not validated (validation verdict {verdict}); re-run the tuning with this "
                f"kernforge")
    if speed is not None and not speed.faster:
        return speed.reason
    ci = doc.get("speedup_ci")
    idle, util = idle_of(validation)
    why = refusal(verified=True, idle=idle, utilisation=util,
                  speedup=speedup if isinstance(speedup, (int, float)) else None,
                  ci=(float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2
                  else None, band=band)
    if why is not None:
        return why
    if not isinstance(speedup, (int, float)) or not speedup > min_speedup:
        return f"speedup {speedup} is not above {min_speedup:g}"
    return None


def collect(run_dir: Path, min_speedup: float, band: float = NOISE_BAND
            ) -> tuple[list[Exported], list[str]]:
    """The results to export (one per kernel, device and problem: the fastest) and why the
    others were not."""
    paths = sorted(run_dir.rglob(RESULT_NAME))
    if not paths:
        raise ConfigError(f"no tuning results ({RESULT_NAME}) under {run_dir}",
                          hint="run kernforge tune first, then export its run directory")
    best: dict[str, Exported] = {}
    skipped: list[str] = []
    for path in paths:
        try:
            doc = _load_result(path)
        except ConfigError as exc:  # a damaged result does not stop the others
            damaged.skip(exc)
            continue
        why = why_not(doc, min_speedup, band)
        if why is not None:
            skipped.append(f"{path}: {why}")
        else:
            try:
                ex = _entry(path, doc, idle_of(doc.get("validation"))[0])
            except RecordingError as exc:  # its recording is damaged: the others go on
                damaged.skip(f"{path}: its recording is damaged: {exc.message}")
                continue
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
    writable_file(args.out, "-o/--out")
    if (run_dir / native_deploy_cmd.RESULT).is_file():  # a run of native units
        return native_deploy_cmd.export(run_dir, Path(args.out) if args.out
                                        else run_dir / "deploy.json", args.noise_band)
    exported, skipped = collect(run_dir, args.min_speedup, args.noise_band)
    for line in skipped:
        err_console.print(f"skipped {escape(line)}", soft_wrap=True)
    if not exported:
        err_console.print(f"[bold red]nothing to export:[/] no result under {escape(str(run_dir))}"
                          f" is signed, OK, validated and faster (the speed verdict) with a "
                          f"speedup above {args.min_speedup:g} (the reasons are above)")
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
