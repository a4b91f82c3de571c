"""Native units in ``kernforge tune`` and ``kernforge export`` (``kernforge run --deploy``'s
native path: :mod:`.native_launch`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core import ConfigError, RecordingError
from ..core.fmt import fmt_time
from ..core.jsonio import parse_json, signature_ok
from ..core.native import NativeRecording, NativeSource
from ..deploy import native as nd
from ..deploy.gate import NOISE_BAND, refusal
from ..deploy.generalize import generalize
from ..record.native_format import read_native
from ..replay.native import NativeVariant
from ..replay.native_build import BindingError, build_image
from ..replay.native_share import share_winners
from ..replay.native_tune import (
    RESULT,
    RESULT_FORMAT,
    NativeTuning,
    bind,
    tune_native,
    write_results,
)
from .checks import warn_damaged
from .output import console, err_console


def bind_units(recs: Sequence[NativeRecording], src: NativeSource) -> dict[Path, NativeSource]:
    """The units ``src`` (``--source``) builds: each probed once; a file that builds none of
    them, or builds one wrongly, is a BindingError."""
    bound = {}
    for rec in recs:
        console.print(f"binding {src.program} to {rec.path.name} ({rec.name[:60]})",
                      markup=False)
        if bind(rec.path, rec, src):
            bound[rec.path] = src
    if not bound:
        raise BindingError(f"{src.program} defines none of the recorded kernels "
                           f"({', '.join(sorted({r.entry for r in recs})[:6])})",
                           hint="bind the file that defines the kernel (--kernels selects "
                                "the units), with the same name and parameter types")
    return bound


def tune_units(recs: Sequence[NativeRecording], out: Path, *, repeat: int, passes: int,
               band: float = NOISE_BAND, tolerance: str | None = None,
               source: NativeSource | None = None,
               defines: Sequence[Sequence[tuple[str, str]]] = (),
               others: bool = False) -> list[NativeTuning]:
    """Tune every native unit (with ``source`` bound to those it builds, and the ``defines``
    sets tried on every source build); write the signed results to OUT/native.json. A unit
    whose data turns out damaged is skipped with a warning while others remain (``others``:
    units of another kind are tuned too); with none left, its RecordingError is raised."""
    out.mkdir(parents=True, exist_ok=True)
    done: list[NativeTuning] = []
    damaged: list[RecordingError] = []
    bound = bind_units(recs, source) if source is not None else {}

    def refuse(speedup: float, ci: tuple[float, float]) -> str | None:
        return refusal(verified=True, idle=None, speedup=speedup, ci=ci, band=band)

    for i, rec in enumerate(recs, 1):
        src = bound.get(rec.path) or rec.source
        console.print(f"{i}/{len(recs)} tuning native {rec.path.name} ({rec.name[:60]})"
                      + (f", source: {src.origin} {src.program}" if src else ""), markup=False)
        try:
            t = tune_native(rec.path, rec, repeat=repeat, passes=passes, refuse=refuse,
                            tolerance=tolerance, source=bound.get(rec.path),
                            defines=defines if src else (),
                            progress=lambda k, n: console.print(f"  {k}/{n} configurations "
                                                                "evaluated", markup=False))
        except RecordingError as exc:
            damaged.append(exc)
            continue
        done.append(t)
        write_results(out, done, band)
    if damaged and not done and not others:
        raise damaged[0]
    for bad in damaged:
        warn_damaged(bad)
    if share_winners(done, refuse=refuse, passes=passes, repeat=repeat, tolerance=tolerance,
                     say=lambda line: console.print(line, markup=False)):
        write_results(out, done, band)
    _table(done, out)
    return done


def _table(done: Sequence[NativeTuning], out: Path) -> None:
    table = Table(title=f"native tuning ({out / RESULT})")
    for col in ("unit", "kernel", "tried", "verified", "best", "recorded", "tuned",
                "speedup [95% CI]", "kept"):
        table.add_column(col)
    for t in done:
        ok = sum(1 for m in t.results if m.ok)
        ci = f"{t.speedup:.3f}x [{t.ci[0]:.3f}, {t.ci[1]:.3f}]" if t.speedup and t.ci else "-"
        med = t.medians or (None, None)
        table.add_row(escape(t.unit.name), escape(t.rec.name[:40]), str(len(t.results)),
                      str(ok), escape(t.variants[t.best].label() if t.best else "-"),
                      fmt_time(med[0]), fmt_time(med[1]), ci,
                      "yes" if t.win else escape(f"no: {t.refused}"))
    console.print(table)


def export(run_dir: Path, spec_path: Path, band: float) -> int:
    """A native deployment spec from OUT/native.json: the wins the gate accepts."""
    try:
        doc = parse_json((run_dir / RESULT).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {run_dir / RESULT}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT or \
            signature_ok(doc) is not True:
        raise ConfigError(f"{run_dir / RESULT}: not signed by kernforge tune, or altered",
                          hint="tune again; results are not edited by hand")
    entries, images, params = [], {}, []
    for u in doc["units"]:
        why = "not a win" if u["best"] is None else refusal(
            verified=True, idle=None, speedup=u["speedup"],
            ci=tuple(u["ci"]) if u["ci"] else None, band=band)  # type: ignore[arg-type]
        if why:
            err_console.print(f"skipped {escape(u['unit'])}: {escape(u.get('refused') or why)}",
                              soft_wrap=True)
            continue
        rec = read_native(u["unit"])
        data = _image(rec, u["best"])
        name = hashlib.sha256(data).hexdigest()[:32] + ".bin"
        images[name] = data
        entries.append(nd.entry(rec, u["best"], name, data, {
            "unit": u["unit"], "speedup": u["speedup"], "ci": u["ci"],
            "medians": u["medians"], "variant": u["best_label"]}))
        params.append([(p.offset, p.size) for p in rec.params])
    if not entries:
        err_console.print("[bold red]nothing to export:[/] no native result is a significant, "
                          "verified win (the reasons are above)")
        return 1
    launches = len(entries)
    entries, merges = generalize(entries, params)
    for line in merges:
        console.print(line, markup=False, soft_wrap=True)
    nd.write_spec(spec_path, entries, images)
    console.print(f"{len(entries)} native deployment entr{'y' if len(entries) == 1 else 'ies'} "
                  f"({launches} recorded launch(es)) exported to {spec_path}", markup=False)
    return 0


def _image(rec: NativeRecording, best: dict[str, Any]) -> bytes:
    """The winner's image: the recorded one, or the one its build makes (from the build cache
    the tuning filled, else built again the same way)."""
    v = NativeVariant.from_json(best)
    if v.build is None:
        return rec.image_bytes()
    cc = rec.identity.get("compute_capability") or [0, 0]
    return build_image(rec, v.build, (int(cc[0]), int(cc[1])))
