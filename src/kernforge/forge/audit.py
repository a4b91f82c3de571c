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

import json
import tempfile
from pathlib import Path
from typing import Any

from ..backends.cuda_build import nvcc_ptx, ptxas_registers, require_toolkit, toolkit_include
from ..backends.cuda_modules import NvrtcPtx, find_nvrtc
from ..stencil import matrix as mx
from ..stencil.kernels.common import MAX_THREADS_PER_SM
from ..stencil.spec import Cell
from .compile_check import nvcc_options

REGS_PER_SM, BLOCKS_PER_SM, SMEM_PER_SM = 65536, 32, 228 * 1024  # sm_90


def blocks_per_sm(regs: int, threads: int, shared: int) -> int:
    per_block = -(-regs // 8) * 8 * threads  # registers are allocated 8 per thread at a time
    n = min(REGS_PER_SM // max(per_block, 1), MAX_THREADS_PER_SM // threads, BLOCKS_PER_SM)
    return min(n, SMEM_PER_SM // (shared + 1024)) if shared else n


def audit(cells: list[Cell], table: dict[str, Any], nvrtc: NvrtcPtx, include: str,
          arch: str = "sm_90") -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kf-audit-") as tmp:
        src, a, b = Path(tmp, "op.cu"), Path(tmp, "nvrtc.ptx"), Path(tmp, "nvcc.ptx")
        for cell in cells:
            op = mx.operator_for(cell, table)
            src.write_text(op.source)
            a.write_text(nvrtc.ptx(op.source, [*op.options, f"-arch=compute_{arch[3:]}",
                                               f"-I{include}", "-ftz=true"]))
            nvcc_ptx(src, nvcc_options(op, arch), b)
            r_nvrtc, r_nvcc = ptxas_registers(a, arch), ptxas_registers(b, arch)
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
    require_toolkit()
    entries = mx.load_table(table)
    ids = cell_ids.split(",") if cell_ids else sorted(entries)
    include = toolkit_include()
    rows = audit([Cell.parse(c.strip()) for c in ids if c.strip()], entries,
                 NvrtcPtx(find_nvrtc(nvrtc)), include)
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

