"""Merge stencil bench results into the latest measurement per cell and summarize the matrix:
``kernforge stencil merge`` under its older name (see :mod:`kernforge.forge.latest`).

    python scripts/stencil_latest.py OLD.json ... NEW.json --out latest.json [--png chart.png]
"""

from __future__ import annotations

import sys

from kernforge.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["stencil", "merge", *sys.argv[1:]]))
