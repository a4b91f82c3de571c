#!/usr/bin/env python3
"""What nvcc makes of the operators generated for a lifted HeCBench kernel, beside the original
kernel (no GPU): registers, static shared memory and spills (``-Xptxas -v``), and, when
``nvdisasm`` is found (``$NVDISASM``, on PATH or in the CUDA toolkit), the static SASS: every
instruction, global loads and stores, shuffles, atomics, fences and barriers.

The kernel is lifted by probing it on the host emulator at a small grid
(``benchmarks/lift_hecbench_emulated.py``), the program is bound to the real grid, and every
candidate of ``designs.candidates`` is generated and compiled with the original's ``-arch``.
Static counts are not run time: they show what a thread executes per point on the path
without branches to the faces (read the listing, ``--keep DIR``), not how long it takes.

Run::

    python benchmarks/lifted_sass.py --hec /work/hecsrc/src jacobi_step --grid 2048 2048
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lift_hecbench_emulated as hec

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.program_binding import bind_probed
from kernforge.backends.cuda_image import nvcc
from kernforge.stencil.program.codegen import standalone
from kernforge.stencil.program.designs import candidates

CLASSES = {"instrs": r"^\s+/\*[0-9a-f]{4}\*/", "LDG": r"\bLDG\b", "STG": r"\bSTG\b",
           "SHFL": r"\bSHFL\b", "ATOM/RED": r"\b(ATOMG?|REDG?)\b", "MEMBAR": r"\bMEMBAR\b",
           "BAR": r"\bBAR\.SYNC"}


def nvdisasm() -> str | None:
    found = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if found:
        return found
    exe = nvcc()
    cand = Path(exe).resolve().parent / "nvdisasm" if exe else None
    return str(cand) if cand and cand.is_file() else None


def compile_one(source: str, arch: str, keep: Path | None, stem: str) -> dict[str, object]:
    exe = nvcc()
    if exe is None:
        raise SystemExit("no nvcc: put the CUDA toolkit's bin on PATH")
    with tempfile.TemporaryDirectory(prefix="kf-sass-") as tmp:
        src, cubin = Path(tmp) / f"{stem}.cu", Path(tmp) / f"{stem}.cubin"
        src.write_text(source)
        done = subprocess.run([exe, "-cubin", f"-arch={arch}", "-O3", "-Xptxas", "-v", "-o",
                               str(cubin), str(src)], capture_output=True, text=True, check=False)
        if done.returncode:
            return {"error": done.stderr.strip()[-400:]}
        log = done.stderr
        row: dict[str, object] = {
            "regs": int(m.group(1)) if (m := re.search(r"Used (\d+) registers", log)) else None,
            "smem": int(m.group(1)) if (m := re.search(r"(\d+) bytes smem", log)) else 0,
            "spill": int(m.group(1)) if (m := re.search(r"(\d+) bytes spill stores", log))
            else 0}
        dis = nvdisasm()
        if dis:
            sass = subprocess.run([dis, "-c", str(cubin)], capture_output=True, text=True,
                                  check=False).stdout
            lines = [ln for ln in sass.splitlines() if re.match(CLASSES["instrs"], ln)
                     and "NOP" not in ln]
            for name, rx in CLASSES.items():
                row[name] = len(lines) if name == "instrs" else \
                    sum(1 for ln in lines if re.search(rx, ln))
            if keep:
                (keep / f"{stem}.sass").write_text(sass)
        if keep:
            (keep / f"{stem}.cu").write_text(source)
        return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", help="a kernel of lift_hecbench_emulated.kernels(), e.g. jacobi_step")
    ap.add_argument("--hec", type=Path, required=True, help="HeCBench's src directory")
    ap.add_argument("--grid", type=int, nargs="+", required=True, help="nx [ny [nz]]")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--keep", type=Path, help="write every source and SASS listing here")
    a = ap.parse_args(argv)
    k = next((k for k in hec.kernels(32, 20) if k.name == a.kernel), None)
    if k is None:
        raise SystemExit(f"no kernel {a.kernel} in lift_hecbench_emulated.kernels()")
    body = hec.kernel_text(a.hec / k.file, k.name)
    code = k.prelude + body.replace("__global__", 'extern "C" __global__', 1)
    r = lift_probe(hec.Target(k, code))
    if not isinstance(r, Probed):
        raise SystemExit(f"not lifted: {r.reason}")
    shape = (tuple(a.grid) + (1, 1))[:3]
    b = dataclasses.replace(bind_probed(r), shape=shape)  # type: ignore[arg-type]
    print(r.program.describe())
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    # the original with its macros at the real grid (HeCBench jacobi's N, ...)
    real = re.sub(r"#define N \d+", f"#define N {shape[0]}", code)
    rows = [("original", compile_one(real, a.arch, a.keep, "original"))]
    ks, refused = candidates(r.program, b)
    rows += [(kk.key, compile_one(standalone(kk), a.arch, a.keep, f"op{i}"))
             for i, kk in enumerate(ks)]
    cols = ["regs", "smem", "spill", *CLASSES]
    print("| kernel | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, row in rows:
        print(f"| {name} | " + " | ".join(str(row.get(c, row.get("error", "-"))) for c in cols)
              + " |")
    for d, why in refused.items():
        print(f"refused {d}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
