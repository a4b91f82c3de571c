"""``kernforge export``'s work: a deployment spec from a run's results
(``RUN_DIR/**/result.json``, one per unit, of tuning or evolution), whatever kind of units the
run holds. Recordings' results give a spec of tuned variants (:mod:`kernforge.deploy.spec`);
native units' (and a ``native.json`` of earlier runs) a native spec of images the interposer
loads (:mod:`kernforge.deploy.native`); a run with both gives both. Either way a
result is exported only when it is signed and unaltered and the gate
(:mod:`kernforge.deploy.gate`) accepts its win; the others are named with the reason."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.image_build import build_image
from ..core import ConfigError, LaunchConfig, Recording, RecordingError, Variant
from ..core.jsonio import parse_json, signature_ok
from ..core.native import NativeRecording
from ..deploy import DeployEntry, entry_from_recording, write_spec
from ..deploy import native as nd
from ..deploy.gate import NOISE_BAND, idle_of, refusal, speed_of
from ..deploy.generalize import generalize
from ..record import load_recording
from ..record.native_format import read_native
from ..replay.native import NativeVariant
from ..replay.native_result import is_native_result
from ..replay.native_tune import RESULT as NATIVE_RESULT
from ..replay.native_tune import RESULT_FORMAT as NATIVE_RESULT_FORMAT
from .notes import QUIET, Notes

RESULT_NAME = "result.json"
RESULT_FORMAT = "kernforge-tune-result"
RESULT_VERSIONS = (1,)
ACCEPTED_VERDICTS = ("accepted", "downgraded")  # replay.validate: the winner passed every gate


@dataclass(frozen=True)
class Exported:
    result: Path
    recording: Recording
    entry: DeployEntry
    confidence: float | None = None  # of the speedup's interval (None: the result does not say)


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
    ab = doc.get("interleaved")
    conf = ab.get("confidence") if isinstance(ab, Mapping) else None
    return Exported(path, recording, entry,
                    float(conf) if isinstance(conf, int | float) and 0 < conf < 1 else None)


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


def collect(run_dir: Path, min_speedup: float, band: float = NOISE_BAND,
            notes: Notes = QUIET) -> tuple[list[Exported], list[str]]:
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
            notes.damaged(exc)
            continue
        if is_native_result(doc):  # a native unit's: :func:`_export_native` exports it
            continue
        why = why_not(doc, min_speedup, band)
        if why is not None:
            skipped.append(f"{path}: {why}")
        else:
            try:
                ex = _entry(path, doc, idle_of(doc.get("validation"))[0])
            except RecordingError as exc:  # its recording is damaged: the others go on
                notes.damaged(f"{path}: its recording is damaged: {exc.message}")
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


@dataclass
class ExportOutcome:
    """What an export wrote of one kind of spec: ``spec`` (None: nothing was exportable, each
    reason given to ``notes.skipped``); recordings' (``native`` False): ``exported``; native
    units' (``native``): ``entries`` written for ``launches`` recorded launches, ``merges``
    naming launches one entry covers. ``also``: the native units' export of a run that tuned
    units of both kinds (its spec beside ``spec``: :func:`native_spec_path`)."""

    native: bool
    spec: Path | None = None
    exported: list[Exported] = field(default_factory=list)
    entries: int = 0
    launches: int = 0
    merges: list[str] = field(default_factory=list)
    also: ExportOutcome | None = None


def native_spec_path(spec: Path) -> Path:
    """Where the native spec of a run with units of both kinds goes: beside the recordings'
    (``deploy.json`` -> ``deploy.native.json``)."""
    return spec.with_name(f"{spec.stem}.native{spec.suffix or '.json'}")


def export_run(run_dir: Path, spec_path: Path | None, *, min_speedup: float = 1.0,
               band: float = NOISE_BAND, notes: Notes = QUIET) -> ExportOutcome:
    """The deployment spec of a run's per-unit results (``spec_path``, default
    RUN_DIR/deploy.json), each kind of unit's wins into the spec of its kind: recordings'
    tuned variants, native units' images (at :func:`native_spec_path` when the run holds
    both kinds)."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory",
                          hint="give the directory of a tuning run")
    spec = spec_path or run_dir / "deploy.json"
    native, others = _native_units(run_dir, notes)
    source = _export_recordings(run_dir, spec, min_speedup, band, notes) \
        if others or native is None else None
    if native is None:
        assert source is not None
        return source
    written = _export_native(native, spec if source is None else native_spec_path(spec), band,
                             notes)
    if source is None:
        return written
    source.also = written
    return source


def _export_recordings(run_dir: Path, spec: Path, min_speedup: float, band: float,
                       notes: Notes) -> ExportOutcome:
    """The spec of tuned variants from the recordings' results that are wins."""
    exported, skipped = collect(run_dir, min_speedup, band, notes)
    for line in skipped:
        notes.skipped(line)
    if not exported:
        return ExportOutcome(native=False)
    return ExportOutcome(native=False, spec=write_spec(spec, [ex.entry for ex in exported]),
                         exported=exported)


def _native_units(run_dir: Path, notes: Notes) -> tuple[list[dict[str, Any]] | None, bool]:
    """The native units' results of a run (None: it tuned none): each unit's result.json
    (:mod:`kernforge.replay.native_result`, written by tuning and by evolution), and the units
    of any native.json under it (written before every unit had its result.json: by tuning
    into the run directory, by evolution into the kernel's), signed and unaltered; and whether
    it holds other results (recordings', or ones that cannot be told: the recordings' export
    names them)."""
    units: list[dict[str, Any]] = []
    found = others = False
    for legacy in sorted(run_dir.rglob(NATIVE_RESULT)):
        found = True
        try:
            doc = parse_json(legacy.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {legacy}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != NATIVE_RESULT_FORMAT or \
                signature_ok(doc) is not True:
            raise ConfigError(f"{legacy}: not signed by kernforge tune, or altered",
                              hint="tune again; results are not edited by hand")
        units += [{**u, "unit": _legacy_unit(str(u["unit"]), run_dir)} for u in doc["units"]]
    for path in sorted(run_dir.rglob(RESULT_NAME)):
        try:
            doc = parse_json(path.read_text("utf-8"))
        except (OSError, ValueError):
            others = True  # not a native unit's that can be told: the recordings' export
            continue  # names it
        if not is_native_result(doc):
            others = True
            continue
        found = True
        if signature_ok(doc) is not True:
            notes.skipped(f"{path}: not signed by kernforge tune, or altered: tune again")
            continue
        units.append({**doc["native"], "result": str(path),  # named by it when skipped
                      "unit": str(doc.get("recording") or doc["native"]["unit"])})
    return (units if found else None), others


def _legacy_unit(unit: str, run_dir: Path) -> str:
    """A native.json's unit path, which is as tuning was given it (relative to where it ran):
    found from here, else from the run directory's parents (the unit's manifest there)."""
    path = Path(unit)
    if path.is_absolute() or (path / "manifest.json").is_file():
        return unit
    for base in run_dir.resolve().parents:
        if (base / path / "manifest.json").is_file():
            return str(base / path)
    return unit


def _export_native(units: list[dict[str, Any]], spec_path: Path, band: float,
                   notes: Notes) -> ExportOutcome:
    """A native deployment spec from the native units' results: the wins the gate accepts."""
    entries, images, params = [], {}, []
    wins: dict[str, dict[str, Any]] = {}  # per unit, the fastest (a tuning's or an evolution's)
    for u in units:
        speed = speed_of(u)  # the verdict tuning drew (the runs' spread, the GPU's busy check)
        why = "not a win" if u["best"] is None else \
            speed.reason if speed is not None and not speed.faster else refusal(
                verified=True, idle=None, speedup=u["speedup"],
                ci=tuple(u["ci"]) if u["ci"] else None, band=band)  # type: ignore[arg-type]
        if why:  # named by its result.json, as a recording's (a native.json's: its unit)
            notes.skipped(f"{u.get('result') or u['unit']}: {u.get('refused') or why}")
            continue
        other = wins.get(u["unit"])
        if other is not None:
            slower = u if other["speedup"] >= u["speedup"] else other
            faster = other if slower is u else u
            notes.skipped(f"{slower.get('result') or slower['unit']}: {slower['best_label']} "
                          f"is slower than {faster['best_label']} for the same unit")
            if slower is u:
                continue
        wins[u["unit"]] = u
    for u in wins.values():
        rec = read_native(u["unit"])
        data = _image(rec, u["best"])
        name = hashlib.sha256(data).hexdigest()[:32] + ".bin"
        images[name] = data
        entries.append(nd.entry(rec, u["best"], name, data, {
            "unit": u["unit"], "speedup": u["speedup"], "ci": u["ci"],
            "medians": u["medians"], "variant": u["best_label"]}))
        params.append([(p.offset, p.size) for p in rec.params])
    if not entries:
        return ExportOutcome(native=True)
    launches = len(entries)
    entries, merges = generalize(entries, params)
    nd.write_spec(spec_path, entries, images)
    return ExportOutcome(native=True, spec=spec_path, entries=len(entries), launches=launches,
                         merges=list(merges))


def _image(rec: NativeRecording, best: dict[str, Any]) -> bytes:
    """The winner's image: the recorded one, or the one its build makes (from the build cache
    the tuning filled, else built again the same way)."""
    v = NativeVariant.from_json(best)
    if v.build is None:
        return rec.image_bytes()
    cc = rec.identity.get("compute_capability") or [0, 0]
    return build_image(rec, v.build, (int(cc[0]), int(cc[1])))
