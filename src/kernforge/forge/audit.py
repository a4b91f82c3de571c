"""Compare the two builds of the dispatch table's operators, without a GPU: nvcc (the forge's
``--build nvcc`` cubins) against NVRTC (what dispatch and the bench load, CuPy's way: its
``-ftz=true`` appended), by the registers ``ptxas -v`` reports for each entry and what they
leave of a multiprocessor (blocks per SM, H200 limits).

    kernforge stencil audit [--table matrix.json] [--cell-ids A,B] [--json out.json]

Needs nvcc and ptxas on PATH and libnvrtc (``pip install 'nvidia-cuda-nvrtc==13.0.*'``, or
``--nvrtc PATH``, or ``$KERNFORGE_NVRTC``). Both builds go through the same ptxas, so a
difference comes from the front ends (a temporal operator once got 64 registers from nvcc and
76 from NVRTC: two 512-thread blocks per multiprocessor against one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..stencil import matrix as mx
from ..stencil.kernels.common import MAX_THREADS_PER_SM
from ..stencil.spec import Cell
from .compile_check import nvcc_options

REGS_PER_SM, BLOCKS_PER_SM, SMEM_PER_SM = 65536, 32, 228 * 1024  # sm_90


def find_nvrtc(given: str | None) -> Path:
    """libnvrtc: --nvrtc, $KERNFORGE_NVRTC, the nvidia-cuda-nvrtc wheel, the system's."""
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"--nvrtc {given}: no such file", hint="a libnvrtc.so.13")
        return Path(given)
    cands = [os.environ.get("KERNFORGE_NVRTC")]
    for site in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            cands += [str(p) for p in sorted(Path(site, sub).glob("libnvrtc.so*"))
                      if "builtins" not in p.name and "alt" not in p.name]
    cands.append(ctypes.util.find_library("nvrtc"))
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    raise ConfigError("libnvrtc not found", hint="pip install 'nvidia-cuda-nvrtc==13.0.*', or "
                      "pass --nvrtc /path/to/libnvrtc.so.13")


class Nvrtc:
    def __init__(self, path: Path) -> None:
        for b in sorted(path.parent.glob("libnvrtc-builtins.so*")):  # NVRTC dlopens it by name
            if "alt" not in b.name:
                ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(str(path))

    def ptx(self, source: str, options: list[str]) -> str:
        lib, prog = self.lib, ctypes.c_void_p()
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"op.cu", 0, None, None)
        try:
            arr = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            if lib.nvrtcCompileProgram(prog, len(options), arr) != 0:
                n = ctypes.c_size_t()
                lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value)
                lib.nvrtcGetProgramLog(prog, log)
                raise RuntimeError(log.value.decode(errors="replace")[:2000])
            n = ctypes.c_size_t()
            lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetPTX(prog, buf)
            return buf.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def registers(ptx: Path, arch: str) -> dict[str, int]:
    err = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(ptx), "-o", os.devnull],
                         capture_output=True, text=True, check=True).stderr
    out, entry = {}, None
    for line in err.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = m.group(1)
        elif (m := re.search(r"Used (\d+) registers", line)) and entry:
            out[entry] = int(m.group(1))
    return out


def blocks_per_sm(regs: int, threads: int, shared: int) -> int:
    per_block = -(-regs // 8) * 8 * threads  # registers are allocated 8 per thread at a time
    n = min(REGS_PER_SM // max(per_block, 1), MAX_THREADS_PER_SM // threads, BLOCKS_PER_SM)
    return min(n, SMEM_PER_SM // (shared + 1024)) if shared else n


def audit(cells: list[Cell], table: dict[str, Any], nvrtc: Nvrtc, include: str,
          arch: str = "sm_90") -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kf-audit-") as tmp:
        src, a, b = Path(tmp, "op.cu"), Path(tmp, "nvrtc.ptx"), Path(tmp, "nvcc.ptx")
        for cell in cells:
            op = mx.operator_for(cell, table)
            src.write_text(op.source)
            a.write_text(nvrtc.ptx(op.source, [*op.options, f"-arch=compute_{arch[3:]}",
                                               f"-I{include}", "-ftz=true"]))
            subprocess.run(["nvcc", "-ptx", *nvcc_options(op, arch), "-o", str(b), str(src)],
                           capture_output=True, text=True, check=True)
            r_nvrtc, r_nvcc = registers(a, arch), registers(b, arch)
            for launch in {la.entry: la for la in op.launches}.values():
                threads = launch.block[0] * launch.block[1] * launch.block[2]
                ra, rb = r_nvrtc[launch.entry], r_nvcc[launch.entry]
                rows.append({"cell": cell.id, "operator": op.key, "entry": launch.entry,
                             "threads": threads, "nvrtc_registers": ra, "nvcc_registers": rb,
                             "nvrtc_blocks_per_sm": blocks_per_sm(ra, threads,
                                                                  launch.shared_bytes),
                             "nvcc_blocks_per_sm": blocks_per_sm(rb, threads,
                                                                 launch.shared_bytes)})
    return rows


def run(table: Path = mx.TABLE_PATH, *, cell_ids: str | None = None, nvrtc: str | None = None,
        json_out: Path | None = None) -> int:
    """Build every chosen operator of ``table`` both ways (``cell_ids``: comma-separated,
    default the table's; ``nvrtc``: the libnvrtc.so) and print where the registers differ;
    the rows also go to ``json_out``."""
    for tool in ("nvcc", "ptxas"):
        if not shutil.which(tool):
            raise ConfigError(f"{tool} is not on PATH", hint="install the CUDA toolkit")
    entries = mx.load_table(table)
    ids = cell_ids.split(",") if cell_ids else sorted(entries)
    nvcc = Path(shutil.which("nvcc") or "nvcc").resolve()
    include = next((str(d) for d in (nvcc.parents[1] / "include", Path("/usr/local/cuda/include"))
                    if (d / "cuda_fp16.h").is_file()), "/usr/local/cuda/include")
    rows = audit([Cell.parse(c.strip()) for c in ids if c.strip()], entries,
                 Nvrtc(find_nvrtc(nvrtc)), include)
    for r in rows:
        if r["nvrtc_registers"] != r["nvcc_registers"]:
            flag = "  <- blocks/SM differ" if r["nvrtc_blocks_per_sm"] != r[
                "nvcc_blocks_per_sm"] else ""
            print(f"{r['cell']:<32} {r['operator']:<58} registers nvrtc {r['nvrtc_registers']} "
                  f"nvcc {r['nvcc_registers']}, blocks/SM {r['nvrtc_blocks_per_sm']} vs "
                  f"{r['nvcc_blocks_per_sm']}{flag}")
    regs = sum(r["nvrtc_registers"] != r["nvcc_registers"] for r in rows)
    occ = sum(r["nvrtc_blocks_per_sm"] != r["nvcc_blocks_per_sm"] for r in rows)
    print(f"{len(rows)} entries of {len(ids)} operators: {regs} differ in registers, "
          f"{occ} in blocks per SM")
    if json_out:
        json_out.write_text(json.dumps({"rows": rows}, indent=1))
    return 0

