"""Merge stencil bench results into the latest measurement per cell and summarize the matrix:
the same as ``kernforge stencil merge`` (see :mod:`kernforge.forge.latest`).

    python scripts/stencil_latest.py OLD.json ... NEW.json --out latest.json [--png chart.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernforge.core import KernforgeError
from kernforge.forge import latest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="bench JSON files, oldest first")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--note", default="")
    ap.add_argument("--drift", type=float, default=0.10,
                    help="flag a baseline slower than its fastest earlier time by more than this")
    ap.add_argument("--by-date", action="store_true",
                    help="order the files by the date each run recorded (default: as given)")
    args = ap.parse_args()
    try:
        doc, rows = latest.merged(args.inputs, drift_tol=args.drift, note=args.note,
                                  by_date=args.by_date)
    except KernforgeError as exc:
        raise SystemExit(exc.message) from None
    latest.write(doc, rows, args.out, args.png)
    print("\n".join(latest.report_lines(doc)))


if __name__ == "__main__":
    main()
