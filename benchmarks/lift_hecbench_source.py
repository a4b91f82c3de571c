#!/usr/bin/env python3
"""How many of HeCBench's stencil/PDE kernels lift from their real source (CPU only).

For each program of ``benchmarks/hecbench/manifests`` tagged ``(stencil/PDE)``, every
``__global__`` function defined by a ``.cu`` file of ``SRC_ROOT/NAME-cuda`` (its local headers
inlined, as :mod:`kernforge.apps.lift_includes` reads a bound file) goes through
:func:`kernforge.apps.lift_source.lift_source` with the ``-D`` defines of the program's
Makefile (what a manifest's ``defines`` would give). A template kernel is lifted with the
element type of an instantiation the file names (``<float>``/``<double>``), else fp32, as the
app lifts it with the type its recorded name carries; such rows say ``T=``. Printed: one row per kernel (program, kernel,
file, and the lifted program's summary or the refusal), then the counts and the refusal
classes (a reason cut before its first quote or parenthesis), commonest first.

    python benchmarks/lift_hecbench_source.py SRC_ROOT [--json OUT]
    e.g. python benchmarks/lift_hecbench_source.py /work/hecsrc/src
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

from kernforge.apps.lift_includes import kernels_defined, translation_unit
from kernforge.apps.lift_regions import Lifted
from kernforge.apps.lift_source import lift_source

MANIFESTS = Path(__file__).resolve().parent / "hecbench" / "manifests"


def programs() -> list[str]:
    """The HeCBench directory names (``NAME-cuda``) of the stencil/PDE manifests."""
    out = []
    for p in sorted(MANIFESTS.glob("*.toml")):
        head = p.read_text("utf-8").splitlines()[0]
        m = re.match(r"# HeCBench (\S+) \(stencil/PDE\)", head)
        if m:
            out.append(m.group(1))
    return out


def rows(root: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for prog in programs():
        d = root / prog
        if not d.is_dir():
            out.append({"program": prog, "kernel": "-", "file": "-", "lifted": False,
                        "result": f"no directory {d}"})
            continue
        seen: set[str] = set()
        defines = makefile_defines(d)
        for f in sorted(d.glob("*.cu")):
            code = translation_unit(f)
            for k in kernels_defined(code):
                if k in seen:
                    continue
                seen.add(k)
                r = lift_source(code, k, defines=defines)
                note = ""
                if not isinstance(r, Lifted) and "template parameter" in r.reason:
                    m = re.search(r"<\s*(float|double|half)\s*>", code)
                    t = {"float": "fp32", "double": "fp64", "half": "fp16"}[m.group(1)] \
                        if m else "fp32"
                    r, note = lift_source(code, k, defines=defines, precision=t), f"T={t}: "
                text = note + (r.program.describe().replace("\n", "; ")
                               if isinstance(r, Lifted) else r.reason)
                out.append({"program": prog, "kernel": k, "file": f.name,
                            "lifted": isinstance(r, Lifted), "result": " ".join(text.split())})
    return out


def makefile_defines(d: Path) -> tuple[str, ...]:
    """The ``-DNAME[=VALUE]`` options the program's Makefile passes (its build's macros)."""
    mk = d / "Makefile"
    text = mk.read_text("utf-8", errors="replace") if mk.is_file() else ""
    return tuple(dict.fromkeys(m.group(1) for m in re.finditer(r"-D(\w+(?:=[^\s\\]+)?)", text)))


def refusal_class(reason: str) -> str:
    head = re.split(r"[('\"]| by | is no|\s-?\d", re.sub(r"^T=\w+: ", "", reason),
                    maxsplit=1)[0]
    return head.strip().rstrip(":,")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src_root", type=Path, help="HeCBench's src directory (NAME-cuda inside)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    if not a.src_root.is_dir():
        print(f"no directory {a.src_root}: give HeCBench's src directory", file=sys.stderr)
        return 2
    rs = rows(a.src_root)
    print("| program | kernel | file | lifted / refused |\n|---|---|---|---|")
    for r in rs:
        mark = "lifted: " if r["lifted"] else ""
        print(f"| {r['program']} | {r['kernel']} | {r['file']} | {mark}{r['result'][:150]} |")
    kernels = [r for r in rs if r["kernel"] != "-"]
    lifted = [r for r in kernels if r["lifted"]]
    progs = {r["program"] for r in lifted}
    print(f"\n{len(lifted)} of {len(kernels)} kernels lifted from source, in {len(progs)} of "
          f"{len(programs())} programs")
    classes = collections.Counter(refusal_class(r["result"]) for r in kernels
                                  if not r["lifted"])
    for c, n in classes.most_common():
        print(f"{n:4d}  {c}")
    if a.json:
        a.json.write_text(json.dumps(rs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
