"""``kernforge demo``: the main job end to end on an example application.

On a machine with an NVIDIA GPU (the cuda backend available) the CuPy example
``examples/heat3d_cupy.py`` is used, otherwise the CPU example ``examples/heat3d_cpu.py``.
The demo records the application, replays and verifies every recorded kernel, tunes the
hottest one (TPE over compile options and launch parameters, every trial verified; the winner
re-measured interleaved against the recorded configuration), and shows that a variant which
changes the arithmetic is caught. Everything lands in a run directory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..core import BackendUnavailableError, ConfigError, Measurement, Recording
from ..record import find_recordings, load_recording
from ..replay import replay
from ..replay.tuning import TuningOutcome, tune_recording
from ..tune import Budget
from .run_app import record_application

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@dataclass(frozen=True)
class DemoApp:
    backend: str
    script: str
    default_n: int
    wrong_kernel: str  # the kernel a variant that changes the arithmetic is made of
    wrong_label: str
    wrong: dict[str, Any]


APPS = {
    "cuda": DemoApp("cuda", "heat3d_cupy.py", 256, "heat_stencil",
                    "fmad=false (no fused multiply-add)", {"options": {"fmad": False}}),
    "cpu": DemoApp("cpu", "heat3d_cpu.py", 128, "heat_step",
                   "CENTER_WEIGHT=5.0 (a wrong stencil weight)",
                   {"defines": {"CENTER_WEIGHT": "5.0"}}),
}


@dataclass
class DemoResult:
    run_dir: Path
    app: DemoApp
    app_status: int
    baseline: list[tuple[Recording, Measurement]] = field(default_factory=list)
    tuned: TuningOutcome | None = None
    wrong: Measurement | None = None
    wrong_unit: str = ""


def pick_app(backend: str | None) -> DemoApp:
    """The CUDA example when a GPU is usable (or asked for), else the CPU one."""
    if backend is not None:
        if backend not in APPS:
            raise ConfigError(f"no demo for backend {backend!r}",
                              hint=f"choose one of: {', '.join(APPS)}")
        return APPS[backend]
    try:
        get_backend("cuda")
        return APPS["cuda"]
    except BackendUnavailableError:
        return APPS["cpu"]


def run_demo(out: Path | None = None, *, backend: str | None = None, n: int | None = None,
             steps: int = 20, trials: int = 12, repeat: int = 7,
             progress: Callable[[str], None] = lambda s: None) -> DemoResult:
    app = pick_app(backend)
    script = EXAMPLES / app.script
    if not script.is_file():
        raise ConfigError(f"example application {script} not found",
                          hint="run the demo from a clone of kernforge")
    run_dir = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    rec_dir = run_dir / "recordings"
    size = n or app.default_n
    progress(f"recording {app.script} (n={size}, {steps} steps) into {rec_dir}")
    status, _ = record_application(["python", str(script), "--n", str(size), "--steps",
                                    str(steps)], rec_dir, max_instances=2, skip=1)
    result = DemoResult(run_dir, app, status)
    for path in find_recordings(rec_dir):
        rec = load_recording(path)
        progress(f"replaying {rec.name}")
        result.baseline.append((rec, replay(rec, repeat=repeat)))
    if not result.baseline:
        raise ConfigError(f"{app.script} recorded no kernel launches",
                          hint="check that the application runs: python " + str(script))
    hot = max(result.baseline, key=lambda rm: rm[1].median if rm[1].ok else 0.0)[0]
    progress(f"tuning {hot.name} ({trials} trials, every one verified)")
    result.tuned = tune_recording(hot, run_dir / "tune", preset="quick",
                                  budget=Budget(trials=trials), repeat=repeat,
                                  on_trial=lambda t: progress(
                                      f"tuning {hot.name}: trial {t.number} {t.status.value}"))
    target = next((rec for rec, _ in result.baseline if rec.source.entry == app.wrong_kernel),
                  hot)
    progress(f"variant {app.wrong_label} of {target.name}")
    result.wrong = replay(target, repeat=1, warmup=0, **app.wrong)
    result.wrong_unit = target.name
    _write_summary(run_dir / "summary.json", result)
    return result


def _write_summary(path: Path, r: DemoResult) -> None:
    t = r.tuned
    data = {
        "run_dir": str(r.run_dir), "backend": r.app.backend, "app": r.app.script,
        "app_status": r.app_status,
        "baseline": [{"unit": rec.name, **m.to_json()} for rec, m in r.baseline],
        "tuned": None if t is None else {
            "unit": t.recording.name, "result": str(t.directory / "result.json"),
            "baseline_median_s": t.baseline_s, "best_median_s": t.best_s,
            "speedup_interleaved": t.speedup,
            "speedup_ci": [t.ab.ci_low, t.ab.ci_high] if t.ab else None},
        "wrong": {"label": r.app.wrong_label, **r.wrong.to_json()} if r.wrong else None,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
