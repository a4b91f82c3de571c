"""Native (driver-level) units in ``kernforge replay`` and ``kernforge inspect``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core import Measurement, RecordingError
from ..core.fmt import fmt_time
from ..core.native import NativeRecording
from ..record import find_recordings
from ..record.native_format import is_native_unit, read_native
from ..replay.cache_protocol import (
    apply_mode,
    calibrate,
    in_program_s,
    native_protocol_for,
    stored,
)
from ..replay.native import NativeVariant
from ..replay.native_child import run_isolated
from .checks import finalize_spooled, native_matches, warn_damaged
from .output import console


def load_native_units(path: str | Path, pattern: str | None = None) -> list[NativeRecording]:
    """The native units under ``path`` matching ``pattern`` (mangled name, readable name or
    unit directory); spool units a killed recording left are turned into units first."""
    if Path(path).is_dir():
        finalize_spooled(path)
    out: list[NativeRecording] = []
    for p in find_recordings(path):
        if not is_native_unit(p):
            continue
        try:
            rec = read_native(p, verify=True)
        except RecordingError as exc:
            warn_damaged(exc)
            continue
        if native_matches(rec, pattern):
            out.append(rec)
    return out


def replay_native(recs: list[NativeRecording], *, warmup: int, repeat: int,
                  tolerance: str | None, dtype: str | None, cache: str | None = None,
                  others: bool = False) -> list[tuple[str, str, Measurement, dict[str, Any]]]:
    """Each unit replayed in its own process at its recorded addresses: verify, time, in its
    cache state (``cache`` auto, or None with no user's choice kept: a unit whose time in the
    program is known is replayed both ways and keeps the state nearer to it,
    :func:`calibrate`; None keeps a user's earlier ``--cache warm|flushed``). A unit whose data turns out
    damaged (a blob failing its hash) is skipped with a warning while other units replay
    (``others``: units of another kind did); with none left, its RecordingError is raised."""
    rows = []
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
        warn_damaged(bad)
    return rows


def print_native_replay(rows: list[tuple[str, str, Measurement, dict[str, Any]]]) -> None:
    table = Table(title="replay of native units (driver API, recorded addresses)")
    for col in ("unit", "kernel", "status", "median", "in app", "replay/app", "cache",
                "placed"):
        table.add_column(col, justify="right" if col in ("median", "in app", "replay/app")
                         else "left")
    for unit, name, m, info in rows:
        style = "green" if m.ok else "bold red"
        app = info.get("app_time_ms")
        ratio = f"{m.median / (app / 1e3):.2f}" if m.ok and app and app > 0 else "-"
        placed = f"relocated {info['relocated']}" if info["relocated"] else "recorded"
        table.add_row(escape(unit), escape(name[:60]), f"[{style}]{m.status.value}[/]",
                      fmt_time(m.median if m.ok else None),
                      fmt_time(app / 1e3 if app and app > 0 else None), ratio,
                      escape(info["cache"]["protocol"]), placed)
    console.print(table)
    for unit, _, _, info in rows:
        console.print(f"  {escape(unit)}: cache {escape(info['cache']['protocol'])} "
                      f"({escape(info['cache']['reason'])})", soft_wrap=True)


def inspect_native(recs: list[NativeRecording]) -> list[dict[str, Any]]:
    return [{"path": str(r.path), "kernel": r.entry, "name": r.name, "backend": "driver",
             "image_kind": r.image_kind, "grid": list(r.grid), "block": list(r.block),
             "shared_mem": r.shared_mem, "param_bytes": len(r.param_bytes),
             "params": [{"offset": p.offset, "size": p.size,
                         "points_into": sorted({i for _, i in p.pointers})} for p in r.params],
             "regions": [{"address": hex(g.address), "size": g.size, "kind": g.kind,
                          "written": g.epilogue is not None} for g in r.regions],
             "bytes": r.nbytes, "identity": dict(r.identity), "capture": dict(r.capture),
             "cache": native_protocol_for(r).to_json(),
             "source": None if r.source is None else {
                 "origin": r.source.origin, "program": r.source.program,
                 "options": list(r.source.options), "name_expression": r.source.name_expression,
                 "headers": [n for n, _ in r.source.headers],
                 "lines": r.source.code.count("\n") + 1}}
            for r in recs]


def print_native_inspect(recs: list[NativeRecording]) -> None:
    table = Table(title=f"{len(recs)} native launch(es) (driver level)")
    for col in ("unit", "kernel", "image", "launch", "params", "regions", "written", "size"):
        table.add_column(col)
    for r in recs:
        written = sum(1 for g in r.regions if g.epilogue is not None)
        table.add_row(escape(r.path.name), escape(r.name[:50]),
                      r.image_kind + (f" + {r.source.origin} source" if r.source else ""),
                      f"grid={r.grid} block={r.block} smem={r.shared_mem}",
                      f"{len(r.params)} ({len(r.param_bytes)} B)", str(len(r.regions)),
                      str(written), f"{r.nbytes / 2**20:.2f} MiB")
    console.print(table)
