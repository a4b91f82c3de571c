#!/usr/bin/env python3
"""How long M3a takes on one recorded unit, per path, on a GPU machine: the one-launch match
(``match_unit``), fusion (``fuse_unit``) and, when the recognizer refused the kernel, lifting
(``lift_unit``), each timed on the wall clock as M3a runs them (child processes included),
with the number of candidates tried and what came out.

    python benchmarks/m3a_unit_time.py RUN/apps/heat2d/recording/n4096/dev_lapl_iter-0

(a unit of a ``kernforge app run``/``app batch`` directory, or of ``kernforge record``). Run it
on two checkouts to compare them; it prints one line per path:
``one-launch 41.2 s, 5 candidate(s): OperatorMatch 1.52x`` or ``... NoMatch: <reason>``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kernforge.apps import operator_match as om


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("unit", type=Path, help="a recorded native unit's directory")
    ap.add_argument("--repeat", type=int, default=10, help="the manifest's match_repeat")
    args = ap.parse_args(argv)
    recognized = False
    with tempfile.TemporaryDirectory(prefix="kf-m3a-time-") as tmp:
        for name, fn in (("one-launch", om.match_unit), ("fused", om.fuse_unit),
                         ("lifted", om.lift_unit)):
            if name == "fused" and not recognized or name == "lifted" and recognized:
                print(f"{name}: not tried (as M3a: fusion needs a recognized stencil, "
                      "lifting one the recognizer refused)")
                continue
            t0 = time.monotonic()
            r = fn(args.unit, out_dir=Path(tmp) / name, repeat=args.repeat)
            s = time.monotonic() - t0
            if name == "one-launch":
                recognized = hasattr(r, "spec_path") or getattr(r, "recognized", None) is not None
            what = (f"{type(r).__name__} {r.speedup:.2f}x" if hasattr(r, "spec_path")
                    else f"{type(r).__name__}: {getattr(r, 'reason', '')[:200]}")
            print(f"{name} {s:.1f} s, {len(getattr(r, 'tried', ()))} candidate(s): {what}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
