#!/usr/bin/env python3
"""Replay fidelity: each kernel of the example timed inside the application vs replayed alone.

Records examples/heat3d_cpu.py once, then runs R interleaved rounds: the application with a
timing observer that measures every launch inside it (synchronized; the first launch of each
kernel skipped), then every recorded unit replayed with the harness (cache flushed between runs,
and warm). Per kernel it prints the medians, the median over rounds of the per-round ratio
replay / in-app (so that drift of a shared machine cancels), the protocol each unit is given
(``kernforge replay --cache auto``: replay/cache_protocol.py) and the ratio under it. Exits
non-zero when a kernel's ratio under its given protocol is off by more than the band (default
10%).

Native units of other programs (the GPU must-show): ``kernforge record -o REC -- PROGRAM``, then
``kernforge replay REC --json out.json``: per unit its protocol (``cache``: the one nearer to its
time in the program, measured both ways and stored with the unit), ``median`` and
``app_time_ms``; benchmarks/native_apps.py runs that over the public programs.

    python benchmarks/replay_fidelity.py [--n 128] [--rounds 7] [--band 0.10]
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
from kernforge.replay.cache_protocol import protocol_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "heat3d_cpu.py"


class LaunchTimer:
    """A launch observer: wall time of every launch, synchronized on both sides."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)

    def before(self, event):
        event.backend.synchronize()
        return event.name, time.perf_counter()

    def after(self, token, error):
        name, t0 = token
        self.times[name].append(time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--steps", type=int, default=12, help="time steps per application round")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--repeat", type=int, default=9, help="timed replays per unit and round")
    ap.add_argument("--band", type=float, default=0.10)
    args = ap.parse_args()
    app = runpy.run_path(str(EXAMPLE), run_name="heat3d_example")
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    medians: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    given: dict[str, str] = {}  # kernel -> the protocol its units are given
    with tempfile.TemporaryDirectory() as tmp:
        with kernforge.record(tmp, max_instances=4, skip=1):
            app["run"](args.n, args.steps, quiet=True)
        recs = [load_recording(p) for p in find_recordings(tmp)]
        for _ in range(args.rounds):  # app and replay interleaved, so machine drift cancels
            in_app = _time_in_app(app, args)
            for flush, label in ((True, "flushed"), (False, "warm")):
                per_kernel: dict[str, list[float]] = defaultdict(list)
                for rec in recs:
                    given[rec.source.entry] = protocol_for(rec).protocol
                    m = replay(rec, repeat=args.repeat, flush=flush)
                    if not m.ok:
                        print(f"{rec.name}: {m.status.value} {m.message}", file=sys.stderr)
                        return 1
                    per_kernel[rec.source.entry].extend(m.samples)
                for name, samples in per_kernel.items():
                    r = statistics.median(samples)
                    ratios[name][label].append(r / in_app[name])
                    medians[name][label].append(r)
            for name, t in in_app.items():
                medians[name]["app"].append(t)
    return report(ratios, medians, given, args)


def _time_in_app(app, args) -> dict[str, float]:
    timer = LaunchTimer()
    add_observer(timer)
    try:
        app["run"](args.n, args.steps, quiet=True)
    finally:
        remove_observer(timer)
    return {k: statistics.median(v[1:]) for k, v in timer.times.items() if len(v) > 1}


def report(ratios, medians, given, args) -> int:
    dev = kernforge.get_backend("cpu").identity().get("device", "?")
    table = Table(title=f"replay fidelity, heat3d_cpu n={args.n}, {args.rounds} interleaved "
                        f"rounds, on {dev} ({time.strftime('%Y-%m-%d')})")
    for col in ("kernel", "in app", "replay, flushed", "ratio (median of rounds)",
                "replay, warm", "ratio", "given", "ratio given", f"within {args.band:.0%}"):
        table.add_column(col, justify="right")
    worst = 0.0
    for name in sorted(ratios):
        med = {k: statistics.median(v) for k, v in medians[name].items()}
        rc, rw = statistics.median(ratios[name]["flushed"]), statistics.median(ratios[name]["warm"])
        rg = rw if given[name] == "warm" else rc
        worst = max(worst, abs(rg - 1))
        table.add_row(name, f"{med['app'] * 1e3:.3f} ms", f"{med['flushed'] * 1e3:.3f} ms",
                      f"{rc - 1:+.1%}", f"{med['warm'] * 1e3:.3f} ms", f"{rw - 1:+.1%}",
                      given[name], f"{rg - 1:+.1%}", "yes" if abs(rg - 1) <= args.band else "NO")
    Console(width=150).print(table)
    return 0 if worst <= args.band else 1


if __name__ == "__main__":
    sys.exit(main())
