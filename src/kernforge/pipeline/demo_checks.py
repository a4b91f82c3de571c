"""The checks ``kernforge demo`` makes before any work: a problem the demo can show every step
on, and a fresh run directory (never one that holds an earlier run, never deleting one)."""

from __future__ import annotations

import time
from pathlib import Path

from ..core import ConfigError

# the smallest problem the demo can show its steps on: a grid with interior points (the
# stencil updates 1..n-2 on each axis), and a kernel launched twice (recording skips the first
# launch of each kernel: the wrong variant is made of the recorded heat_step)
MIN_N, MIN_STEPS = 3, 2
WHY_MIN_N = "the stencil updates the interior points 1..n-2 of each axis: n <= 2 has none"
WHY_MIN_STEPS = "the demo records each kernel from its second launch on"


def check_problem(n: int | None, steps: int) -> None:
    """A ConfigError for a grid without interior or too few steps to record every kernel."""
    if n is not None and n < MIN_N:
        raise ConfigError(f"grid size n={n} is too small ({WHY_MIN_N})",
                          hint=f"give n >= {MIN_N}")
    if steps < MIN_STEPS:
        raise ConfigError(f"{steps} time step(s) are too few ({WHY_MIN_STEPS})",
                          hint=f"give steps >= {MIN_STEPS}")


def check_out(out: Path | None) -> None:
    """A ConfigError unless ``out`` is absent or an empty directory: an earlier run's
    recordings and results would mix with this one's, and the demo never deletes a user's
    files. None (the default run directory) passes."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory",
                          hint="choose another --out")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held:
        raise ConfigError(f"--out {out} is not empty (it holds {', '.join(held[:4])}"
                          f"{', ...' if len(held) > 4 else ''}): the demo writes a fresh run "
                          f"directory, and an earlier run's recordings would mix with its own",
                          hint=f"choose another --out (without --out each demo gets a new "
                               f"runs/demo-DATE-TIME), or remove {out} if nothing in it is "
                               f"needed")


def fresh_run_dir(out: Path | None) -> Path:
    """The demo's run directory, created: ``out`` (:func:`check_out`), by default a new
    ``runs/demo-DATE-TIME`` (``-2``, ``-3``, ... for demos started in the same second)."""
    check_out(out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        return out
    base = Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    base.parent.mkdir(parents=True, exist_ok=True)
    candidate, i = base, 2
    while True:  # created, not tested: two demos started together never share one
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate, i = base.with_name(f"{base.name}-{i}"), i + 1
