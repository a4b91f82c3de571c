"""The forge over several GPUs: cells split into balanced groups, one forge process per GPU.

Every cell has its own operator, so the rounds of different cells never interact: N processes,
each pinned to one GPU (``CUDA_VISIBLE_DEVICES``) and forging its share of the cells from the
same starting table, do the work of one run in about 1/N of the time. Their outputs are merged
into one directory laid out like a single run's (matrix.json, perf-log.jsonl, ideas.md,
forge-summary.json); each part's own directory (``gpuI/``) stays beside them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..backends.cuda_build import MAX_JOBS
from ..core import ConfigError
from ..core.jsonio import DamagedJSON, parse_json, write_bytes_atomic, write_json_atomic
from ..stencil import matrix as mx
from ..stencil.spec import Cell
from .loop import check_plan
from .run import check_build


def cost(cell: Cell) -> float:
    """A proxy for a cell's forge time: bytes moved per application, times the work per point."""
    return float(cell.compulsory_bytes * cell.stencil.steps) * (1.0 + cell.stencil.points / 27)


def partition(cells: list[Cell], n: int) -> list[list[Cell]]:
    """``n`` groups of about equal total :func:`cost` (longest first onto the lightest group)."""
    if n < 1:
        raise ConfigError(f"{n} GPUs: need at least one", hint="pass --gpus 1 or more")
    groups: list[list[Cell]] = [[] for _ in range(min(n, len(cells)) or 1)]
    load = [0.0] * len(groups)
    for cell in sorted(cells, key=cost, reverse=True):
        i = load.index(min(load))
        groups[i].append(cell)
        load[i] += cost(cell)
    return [g for g in groups if g]


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU")]


def _pump(proc: subprocess.Popen[str], prefix: str, say: Callable[[str], None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        say(f"{prefix} {line.rstrip()}")


def forge_parallel(cells: list[Cell], out: Path, *, gpus: int, start_table: Path | None,
                   rounds: int, band: float = 0.02, budget_s: float | None = None,
                   emulate: bool = False, devices: list[str] | None = None,
                   changes: Sequence[str] | None = None, seed_design: str | None = None,
                   say: Callable[[str], None] = print, build: str = "nvrtc",
                   seeds: dict[str, str] | None = None,
                   extra: Sequence[str] = ()) -> dict[str, Any]:
    """Forge ``cells`` over ``gpus`` processes (one GPU each) and merge their outputs;
    ``extra``: more ``kernforge stencil forge`` options for each (``--resume``,
    ``--in-process``, ``--eval-timeout S``)."""
    check_plan(rounds, changes, seed_design, seeds, cells)  # before any process starts
    check_build(build)
    devices = devices if devices is not None else visible_gpus()
    if not emulate and len(devices) < gpus:
        raise ConfigError(f"--gpus {gpus}, but {len(devices)} GPU(s) are visible",
                          hint="pass --gpus at most the number nvidia-smi -L lists")
    groups = partition(cells, gpus)
    out.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[int, subprocess.Popen[str], threading.Thread]] = []
    for i, group in enumerate(groups):
        cmd = [sys.executable, "-m", "kernforge", "stencil", "forge", "--rounds", str(rounds),
               "--band", str(band), "--out", str(out / f"gpu{i}"),
               "--cell-ids", ",".join(c.id for c in group), "--build", build]
        if start_table is not None:
            cmd += ["--table", str(start_table)]
        if budget_s is not None:
            cmd += ["--budget", str(budget_s)]
        if emulate:
            cmd.append("--emulate")
        if changes:
            cmd += ["--changes", ",".join(changes)]
        if seed_design:
            cmd += ["--seed-design", seed_design]
        cmd += list(extra)
        for cid in dict.fromkeys(c.id for c in group):  # each process: its own cells' seeds
            if cid in (seeds or {}):
                cmd += ["--seed-operator", f"{cid}={(seeds or {})[cid]}"]
        env = dict(os.environ)
        # the processes share the cores: each builds with its share (forge/nvrtc.py)
        env.setdefault("KERNFORGE_BUILD_JOBS", str(max(1, min(MAX_JOBS, (
            os.cpu_count() or 1) // max(1, len(groups))))))
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[i % len(devices)]
        say(f"[gpu{i}] {len(group)} cells on CUDA device {env.get('CUDA_VISIBLE_DEVICES', '-')}")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        pump = threading.Thread(target=_pump, args=(proc, f"[gpu{i}]", say), daemon=True)
        pump.start()
        procs.append((i, proc, pump))
    codes = []
    for _, proc, pump in procs:
        codes.append(proc.wait())
        pump.join()
    return merge(out, [out / f"gpu{i}" for i in range(len(groups))], groups, start_table, codes)


def merge(out: Path, parts: list[Path], groups: list[list[Cell]], start_table: Path | None,
          codes: list[int]) -> dict[str, Any]:
    """One run's outputs in ``out`` from the parts' directories (each forged ``groups[i]``)."""
    table = mx.load_table(start_table) if start_table is not None and start_table.exists() \
        else {}
    for part, group in zip(parts, groups):
        if (part / "matrix.json").exists():
            got = mx.load_table(part / "matrix.json")
            table.update({c.id: got[c.id] for c in group if c.id in got})
    write_json_atomic(out / "matrix.json", {"version": mx.TABLE_VERSION, "cells": table})
    log = b"".join((p / "perf-log.jsonl").read_bytes() for p in parts
                   if (p / "perf-log.jsonl").exists())
    write_bytes_atomic(out / "perf-log.jsonl", log)
    ideas = [f"<!-- GPU process {i} of {len(parts)} -->\n" + (p / "ideas.md").read_text()
             for i, p in enumerate(parts) if (p / "ideas.md").exists()]
    write_bytes_atomic(out / "ideas.md", "\n".join(ideas).encode())
    summaries: list[dict[str, Any] | None] = []
    for p in parts:
        try:  # a part killed before its end wrote none: its table still counts
            summaries.append(parse_json((p / "forge-summary.json").read_text()))
        except (OSError, DamagedJSON):
            summaries.append(None)
    rounds: dict[int, dict[str, Any]] = {}
    for s in (s for s in summaries if s):
        for r in s["rounds"]:
            agg = rounds.setdefault(r["round"], {"round": r["round"], "change": r["change"],
                                                 "accepted": 0, "rejected": 0, "unchanged": 0})
            for k in ("accepted", "rejected", "unchanged"):
                agg[k] += r[k]
    summary = {
        "rounds": [rounds[k] for k in sorted(rounds)],
        "final": [rec for s in summaries if s for rec in s["final"]],
        "regressed": [c for s in summaries if s for c in s["regressed"]],
        "parts": [{"dir": p.name, "cells": len(g), "returncode": rc,
                   "seconds": (s or {}).get("seconds"), "stopped": (s or {}).get("stopped")}
                  for p, g, rc, s in zip(parts, groups, codes, summaries)],
        "failed": [p.name for p, rc, s in zip(parts, codes, summaries)
                   if s is None or rc not in (0, 1)],
    }
    write_json_atomic(out / "forge-summary.json", summary)
    return summary
