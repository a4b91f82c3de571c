"""Native units (launches the driver interposer recorded from unchanged programs) on the unit
pipelines' path (:mod:`.units`): loaded, replayed at their recorded addresses, described,
bound to a ``--source`` file and tuned. Each unit runs in a child process
(:mod:`kernforge.replay.native_child`), so a crash costs that unit only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from ..core import Measurement, RecordingError
from ..core.native import NativeRecording, NativeSource
from ..deploy.gate import NOISE_BAND, refusal
from ..record import find_recordings
from ..record.native_format import finalize_spool, is_native_unit, read_native
from ..replay.cache_protocol import (
    apply_mode,
    calibrate,
    in_program_s,
    native_protocol_for,
    stored,
)
from ..replay.native import NativeVariant
from ..replay.native_build import BindingError
from ..replay.native_child import run_isolated
from ..replay.native_share import share_winners
from ..replay.native_tune import RESULT, NativeTuning, bind, tune_native, write_results
from ..replay.tuning import keep_earlier
from .notes import QUIET, Notes

NativeRow = tuple[str, str, Measurement, dict[str, Any]]  # unit, kernel, measurement, info


def native_matches(rec: NativeRecording, pattern: str | None) -> bool:
    """``pattern`` (a glob) matches the mangled name, the readable name or the unit directory."""
    return not pattern or any(fnmatchcase(s, pattern) for s in (rec.entry, rec.name,
                                                                 rec.path.name))


def finalize_spooled(path: str | Path, notes: Notes) -> None:
    """Spool units a killed recording left, turned into units; each one that cannot be is
    named with its reason (``notes.warn``: the units that are fine are used)."""
    for line in finalize_spool(path)[1]:
        notes.warn(line)


def load_native(path: str | Path, pattern: str | None, notes: Notes) -> list[NativeRecording]:
    """The native units under ``path`` matching ``pattern``; spool units a killed recording
    left are turned into units first; a damaged unit is skipped (``notes.damaged``)."""
    if Path(path).is_dir():
        finalize_spooled(path, notes)
    out: list[NativeRecording] = []
    for p in find_recordings(path):
        if not is_native_unit(p):
            continue
        try:
            rec = read_native(p, verify=True)
        except RecordingError as exc:
            notes.damaged(exc)
            continue
        if native_matches(rec, pattern):
            out.append(rec)
    return out


def replay_native(recs: Sequence[NativeRecording], *, warmup: int, repeat: int,
                  tolerance: str | None, dtype: str | None, cache: str | None = None,
                  others: bool = False, notes: Notes = QUIET) -> list[NativeRow]:
    """Each unit replayed in its own process at its recorded addresses: verify, time, in its
    cache state (``cache`` auto, or None with no user's choice kept: a unit whose time in the
    program is known is replayed both ways and keeps the state nearer to it,
    :func:`calibrate`; None keeps a user's earlier ``--cache warm|flushed``). A unit whose
    data turns out damaged (a blob failing its hash) is skipped (``notes.damaged``) while
    other units replay (``others``: units of another kind did); with none left, its
    RecordingError is raised."""
    rows: list[NativeRow] = []
    damaged: list[RecordingError] = []
    for rec in recs:
        outs: dict[bool, dict[str, Any]] = {}

        def once(flush: bool, rec: NativeRecording = rec,
                 outs: dict[bool, dict[str, Any]] = outs) -> float | None:
            outs[flush] = run_isolated(rec.path, [NativeVariant()], warmup=warmup,
                                       repeat=repeat, tolerance=tolerance, dtype=dtype,
                                       flush=flush)
            m = outs[flush]["measurements"][0]
            return m.median if m.ok else None

        try:
            kept = stored(rec.path)
            measure = cache == "auto" or (cache is None and (kept is None or kept.by != "user"))
            if measure and in_program_s(rec) is not None:
                choice = calibrate(rec, once)
            else:
                if cache is not None:
                    apply_mode(rec.path, cache)
                choice = native_protocol_for(rec, cache or "auto")
            if choice.flush not in outs:
                once(choice.flush)
        except RecordingError as exc:
            damaged.append(exc)
            continue
        out = outs[choice.flush]
        m = out["measurements"][0]
        info = {"relocated": out.get("relocated") or [], "refusals": out.get("refusals") or [],
                "app_time_ms": rec.capture.get("app_time_ms"), "cache": choice.to_json()}
        rows.append((rec.path.name, rec.name, m, info))
    if damaged and not rows and not others:
        raise damaged[0]
    for bad in damaged:
        notes.damaged(bad)
    return rows


def describe_native(recs: Sequence[NativeRecording]) -> list[dict[str, Any]]:
    """What each unit holds, as ``kernforge inspect --json`` prints it."""
    return [{"path": str(r.path), "kernel": r.entry, "name": r.name, "backend": "driver",
             "image_kind": r.image_kind, "grid": list(r.grid), "block": list(r.block),
             "shared_mem": r.shared_mem, "param_bytes": len(r.param_bytes),
             "params": [{"offset": p.offset, "size": p.size,
                         "points_into": sorted({i for _, i in p.pointers})} for p in r.params],
             "regions": [{"address": hex(g.address), "size": g.size, "kind": g.kind,
                          "written": g.epilogue is not None} for g in r.regions],
             "bytes": r.nbytes, "identity": dict(r.identity), "capture": dict(r.capture),
             "cache": native_protocol_for(r).to_json(),
             "sequence": {**r.sequence, "launches": [s.entry for s in r.steps]}
             if r.is_sequence else None,
             "source": None if r.source is None else {
                 "origin": r.source.origin, "program": r.source.program,
                 "options": list(r.source.options), "name_expression": r.source.name_expression,
                 "headers": [n for n, _ in r.source.headers],
                 "lines": r.source.code.count("\n") + 1}}
            for r in recs]


def bind_units(recs: Sequence[NativeRecording], src: NativeSource,
               notes: Notes = QUIET) -> dict[Path, NativeSource]:
    """The units ``src`` (``--source``) builds: each probed once; a file that builds none of
    them, or builds one wrongly, is a BindingError."""
    bound = {}
    for rec in recs:
        notes.say(f"binding {src.program} to {rec.path.name} ({rec.name[:60]})")
        if bind(rec.path, rec, src):
            bound[rec.path] = src
    if not bound:
        raise BindingError(f"{src.program} defines none of the recorded kernels "
                           f"({', '.join(sorted({r.entry for r in recs})[:6])})",
                           hint="bind the file that defines the kernel (--kernels selects "
                                "the units), with the same name and parameter types")
    return bound


def tune_native_units(recs: Sequence[NativeRecording], out: Path, *, repeat: int, passes: int,
                      band: float = NOISE_BAND, tolerance: str | None = None,
                      source: NativeSource | None = None,
                      defines: Sequence[Sequence[tuple[str, str]]] = (),
                      others: bool = False, notes: Notes = QUIET) -> list[NativeTuning]:
    """Tune every native unit (with ``source`` bound to those it builds, and the ``defines``
    sets tried on every source build); write the signed results to OUT/native.json. A unit
    whose data turns out damaged is skipped (``notes.damaged``) while others remain
    (``others``: units of another kind are tuned too); with none left, its RecordingError is
    raised."""
    out.mkdir(parents=True, exist_ok=True)
    done: list[NativeTuning] = []
    damaged: list[RecordingError] = []
    bound = bind_units(recs, source, notes) if source is not None else {}

    def refuse(speedup: float, ci: tuple[float, float]) -> str | None:
        return refusal(verified=True, idle=None, speedup=speedup, ci=ci, band=band)

    for i, rec in enumerate(recs, 1):
        src = bound.get(rec.path) or rec.source
        notes.say(f"{i}/{len(recs)} tuning native {rec.path.name} ({rec.name[:60]})"
                  + (f", source: {src.origin} {src.program}" if src else ""))
        try:
            t = tune_native(rec.path, rec, repeat=repeat, passes=passes, refuse=refuse,
                            tolerance=tolerance, source=bound.get(rec.path),
                            defines=defines if src else (),
                            progress=lambda k, n: notes.say(f"  {k}/{n} configurations "
                                                            "evaluated"))
        except RecordingError as exc:
            damaged.append(exc)
            continue
        done.append(t)
        write_results(out, done, band)
    if damaged and not done and not others:
        raise damaged[0]
    for bad in damaged:
        notes.damaged(bad)
    if share_winners(done, refuse=refuse, passes=passes, repeat=repeat, tolerance=tolerance,
                     say=notes.say):
        write_results(out, done, band)
    return done


def native_finished(out: Path, native: Sequence[NativeRecording], remeasure: bool,
                    notes: Notes) -> bool:
    """``--resume`` on native units: a native.json that holds every unit is reported, not
    measured again; otherwise (or with ``remeasure``) it is kept aside and they are tuned."""
    path = out / RESULT
    if not path.is_file():
        return False
    try:
        units = {str(u.get("unit")) for u in json.loads(path.read_text("utf-8"))["units"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        units = set()
    if not remeasure and {str(n.path) for n in native} <= units:
        notes.say(f"native units: finished earlier; not measured again: {path} stands "
                  f"(--remeasure measures them again and keeps it beside the new one)")
        return True
    kept = keep_earlier(path)
    notes.say(f"native units: the earlier {path.name} is kept as {kept}")
    return False
