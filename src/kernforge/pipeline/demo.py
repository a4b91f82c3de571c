"""``kernforge demo``: the main job end to end on the example application.

Record the heat-equation example, replay and verify every recorded kernel, try a handful of
compiler/define variants of the hottest kernel (each verified, then compared interleaved
against the recorded configuration), and show that a variant which changes the arithmetic is
caught. Writes everything into a run directory: recordings, ``summary.json`` and a PNG chart.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core import ConfigError, Measurement, Recording
from ..record import find_recordings, load_recording
from ..replay import compare, replay
from .run_app import record_application

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "heat3d_cpu.py"

# (label, option overrides, define overrides) tried on the hottest kernel.
CANDIDATES: tuple[tuple[str, dict[str, Any], dict[str, str]], ...] = (
    ("O3", {"opt_level": "O3"}, {}),
    ("O3 march=native", {"opt_level": "O3", "march": "native"}, {}),
    ("O3 native unroll", {"opt_level": "O3", "march": "native", "unroll": True}, {}),
    ("O3 native TILE_J=64", {"opt_level": "O3", "march": "native"}, {"TILE_J": "64"}),
)
WRONG: tuple[str, dict[str, Any], dict[str, str]] = ("CENTER_WEIGHT=5.0 (wrong on purpose)", {}, {"CENTER_WEIGHT": "5.0"})


@dataclass
class DemoResult:
    run_dir: Path
    app_status: int
    baseline: list[tuple[Recording, Measurement]] = field(default_factory=list)
    variants: list[tuple[str, Measurement, float | None]] = field(default_factory=list)
    wrong: Measurement | None = None
    chart: Path | None = None


def run_demo(out: Path | None = None, *, app: Path | None = None, n: int = 128, steps: int = 20,
             repeat: int = 7, progress: Callable[[str], None] = lambda s: None) -> DemoResult:
    app = app or EXAMPLE
    if not app.is_file():
        raise ConfigError(f"example application {app} not found",
                          hint="run the demo from a clone of kernforge, or pass --app PATH")
    run_dir = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    rec_dir = run_dir / "recordings"
    progress(f"recording {app.name} (n={n}, {steps} steps) into {rec_dir}")
    status, _ = record_application(["python", str(app), "--n", str(n), "--steps", str(steps)],
                                   rec_dir, max_instances=2, skip=1)
    result = DemoResult(run_dir, status)
    for path in find_recordings(rec_dir):
        rec = load_recording(path)
        progress(f"replaying {rec.name}")
        result.baseline.append((rec, replay(rec, repeat=repeat)))
    hot_rec, hot = max(result.baseline, key=lambda rm: rm[1].median if rm[1].ok else 0.0)
    for label, opts, defs in CANDIDATES:
        progress(f"variant {label} of {hot_rec.name}")
        m = replay(hot_rec, options=opts, defines=defs, repeat=repeat)
        speedup = None
        if m.ok:
            speedup = compare(hot_rec, {}, {"options": opts, "defines": defs}).speedup
        result.variants.append((label, m, speedup))
    progress(f"variant {WRONG[0]} of {hot_rec.name}")
    result.wrong = replay(hot_rec, options=WRONG[1], defines=WRONG[2], repeat=1, warmup=0)
    result.chart = _chart(run_dir / "variants.png", hot_rec, hot, result.variants)
    _write_summary(run_dir / "summary.json", result)
    return result


def _chart(path: Path, rec: Recording, base: Measurement,
           variants: list[tuple[str, Measurement, float | None]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["recorded"] + [v[0] for v in variants if v[1].ok]
    times = [base.median * 1e3] + [v[1].median * 1e3 for v in variants if v[1].ok]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    bars = ax.barh(labels[::-1], times[::-1], color=["#4c72b0"] * (len(labels) - 1) + ["#999"])
    for bar, sp in zip(bars, ([None] + [v[2] for v in variants if v[1].ok])[::-1]):
        if sp:
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {sp:.2f}x",
                    va="center", fontsize=8)
    ax.set_xlabel("median replay time (ms), lower is better")
    ax.set_title(f"{rec.source.entry}: verified variants ({rec.identity.get('device', '?')})",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _write_summary(path: Path, r: DemoResult) -> None:
    data = {
        "run_dir": str(r.run_dir), "app_status": r.app_status,
        "baseline": [{"unit": rec.name, **m.to_json()} for rec, m in r.baseline],
        "variants": [{"label": lbl, "speedup_interleaved": sp, **m.to_json()}
                     for lbl, m, sp in r.variants],
        "wrong": r.wrong.to_json() if r.wrong else None,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
