"""Which manifests' program timers are printed too coarsely for M1 (docs/applications.md: a
printed time whose last digit is 1 % of it or more is refused, as a printed 0 is).

Runs each dataset of each manifest once, unmodified, from its source directory (nothing is
built: build the programs first), and prints per dataset the time as printed, the share of
it its last digit is, and whether M1 takes it. On a GPU machine, for the reviewed HeCBench
manifests (binaries in build/hec):

    python benchmarks/timer_resolution.py benchmarks/hecbench/manifests/*.toml

It exits 1 when a dataset would be refused, so that a manifest can be changed (another
printed timer, a larger dataset, or the wall clock) before a batch spends device time on it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from kernforge.apps.checks import printed_step, seconds
from kernforge.apps.harness import COARSE, AppHarness
from kernforge.apps.manifest import AppManifestError, load_manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("manifests", nargs="+", type=Path)
    args = p.parse_args(argv)
    refused = 0
    print("| manifest | dataset | printed | last digit | M1 |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.manifests:
            try:
                m = load_manifest(path)
            except AppManifestError as exc:
                print(f"| {path.name} | - | - | - | does not load: {exc.message} |")
                refused += 1
                continue
            h = AppHarness(m, Path(tmp) / m.name)
            for d in m.datasets:
                ran = h.run(d, h.original())
                t, printed = seconds(m.timer, ran), printed_step(m.timer, ran)
                if m.timer.kind == "wall":
                    row = ("(wall clock)", "-", "taken")
                elif ran.returncode != 0 or t is None or printed is None or not t > 0:
                    row = ("-", "-", f"no time: {ran.ended}" if ran.returncode else "no time")
                    refused += 1
                else:
                    share = printed[1] / t
                    ok = share < COARSE
                    refused += not ok
                    row = (f"{printed[0]} {m.timer.unit}", f"{share:.2%}",
                           "taken" if ok else "refused: too coarse")
                print(f"| {m.name} | {d.name} | {' | '.join(row)} |", flush=True)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
