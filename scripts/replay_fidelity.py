#!/usr/bin/env python3
"""Replay fidelity: each kernel of the example timed inside the application vs replayed alone.

Runs examples/heat3d_cpu.py in this process twice: once with a timing observer that measures
every launch inside the application (synchronized, the first launch of each kernel skipped),
once under the recorder. Then replays every recorded unit with the harness and prints, per
kernel, the in-application median, the replayed median (cache flushed between runs, the default
protocol, and warm) and their difference. Exits non-zero when a kernel differs by more than the
allowed band (default 10%) under the default protocol.

    python scripts/replay_fidelity.py [--n 128] [--steps 40] [--band 0.10]
"""

from __future__ import annotations

import argparse
import runpy
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

import kernforge
from kernforge.backends import add_observer, remove_observer
from kernforge.record import find_recordings, load_recording
from kernforge.replay import replay

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "heat3d_cpu.py"


class LaunchTimer:
    """A launch observer: wall time of every launch, synchronized on both sides."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)

    def before(self, kernel, compiled, args, launch):  # noqa: ANN001, ANN201
        kernel.backend.synchronize()
        return kernel.name, time.perf_counter()

    def after(self, token, error):  # noqa: ANN001, ANN201
        name, t0 = token
        self.times[name].append(time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--band", type=float, default=0.10)
    args = ap.parse_args()
    app = runpy.run_path(str(EXAMPLE), run_name="heat3d_example")
    timer = LaunchTimer()
    add_observer(timer)
    try:
        app["run"](args.n, args.steps, quiet=True)
    finally:
        remove_observer(timer)
    in_app = {k: statistics.median(v[1:]) for k, v in timer.times.items() if len(v) > 1}
    with tempfile.TemporaryDirectory() as tmp:
        with kernforge.record(tmp, max_instances=4, skip=1):
            app["run"](args.n, min(args.steps, 10), quiet=True)
        cold, warm = defaultdict(list), defaultdict(list)
        for path in find_recordings(tmp):
            rec = load_recording(path)
            for flush, into in ((True, cold), (False, warm)):
                m = replay(rec, repeat=args.repeat, flush=flush)
                if not m.ok:
                    print(f"{rec.name}: {m.status.value} {m.message}", file=sys.stderr)
                    return 1
                into[rec.source.entry].append(m.median)
    return report(in_app, cold, warm, args)


def report(in_app, cold, warm, args) -> int:  # noqa: ANN001
    dev = kernforge.get_backend("cpu").identity().get("device", "?")
    table = Table(title=f"replay fidelity, heat3d_cpu n={args.n} on {dev} "
                        f"({time.strftime('%Y-%m-%d')})")
    for col in ("kernel", "in app (median)", "replay, flushed", "diff", "replay, warm", "diff",
                f"within {args.band:.0%}"):
        table.add_column(col, justify="right")
    worst = 0.0
    for name in sorted(in_app):
        a = in_app[name]
        c, w = statistics.median(cold[name]), statistics.median(warm[name])
        dc, dw = c / a - 1, w / a - 1
        worst = max(worst, abs(dc))
        table.add_row(name, f"{a * 1e3:.3f} ms", f"{c * 1e3:.3f} ms", f"{dc:+.1%}",
                      f"{w * 1e3:.3f} ms", f"{dw:+.1%}", "yes" if abs(dc) <= args.band else "NO")
    Console(width=120).print(table)
    return 0 if worst <= args.band else 1


if __name__ == "__main__":
    sys.exit(main())
