"""M2: record one dataset, and each kernel's share of the run.

The program runs as ``kernforge record`` runs it: the driver interposer preloaded (native
programs, CuPy, PyTorch, ...), a Python program also under the in-process capture. Each
kernel's time in the application comes from what the captures counted: the interposer's
``summary-<pid>.json`` (launches seen, event times of launches it left alone) and the
in-process capture's ``inprocess-<pid>.json`` (the same for ``kernforge.Kernel`` and CuPy
launches). A kernel's total is its launches times its median (interposer) or mean
(in-process) launch time; its share is that over the unmodified program's median run time
(M1). Only kernels that became units can be replaced: their summed share ``f`` gives the
Amdahl ceiling ``1 / (1 - f)`` of what replacing them could give.
"""

from __future__ import annotations

import ctypes.util
import json
import re
import shutil
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..record import interposer
from ..record.native_format import SPOOL, finalize_spool, spool_summaries
from .harness import AppHarness
from .manifest import Dataset
from .process import Ran


def app_driver(env: Mapping[str, str]) -> str | None:
    """The CUDA driver library the application's ``env`` gives it: its ``KERNFORGE_LIBCUDA``,
    else ``libcuda.so.1`` in a directory of its ``LD_LIBRARY_PATH``; None: the system's."""
    if env.get("KERNFORGE_LIBCUDA"):
        return env["KERNFORGE_LIBCUDA"]
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if d and (Path(d) / "libcuda.so.1").is_file():
            return str(Path(d) / "libcuda.so.1")
    return None


def no_launch_reason(env: Mapping[str, str]) -> str:
    """M2's reason when no kernel launch was seen; where this machine has no CUDA driver at
    all (none in the application's ``env``, none the loader knows), that is said too: a GPU
    program cannot launch a kernel there."""
    why = "no kernel launch was seen (nothing kernforge can replace)"
    if app_driver(env) is None and ctypes.util.find_library("cuda") is None:
        why += ("; this machine has no CUDA driver (libcuda.so.1): a GPU program launches "
                "nothing here, so record it on a machine with a GPU")
    return why


def is_python(argv: list[str]) -> bool:
    return bool(argv) and (re.fullmatch(r"python[\d.]*", Path(argv[0]).name) is not None
                           or argv[0].endswith(".py"))


def record_dataset(h: AppHarness, dataset: Dataset, out: Path, *, max_instances: int = 1,
                   kernels: str | None = None, skip: int = 0, sequence: int | None = None
                   ) -> tuple[Ran, list[Path], list[str]]:
    """Run ``dataset`` of the unmodified program under the captures into ``out``; the run,
    the units and the spool units that could not be turned into units. What an earlier,
    killed attempt left in ``out`` is removed first: its units and counts are not this run's.
    ``kernels`` (a glob; default the manifest's), ``skip`` and ``sequence`` as for
    ``kernforge record`` (``sequence``: each recorded instance is a sequence unit of that
    many launches of its kernel, :mod:`.loop_sequence`)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    setup = h.original()
    argv = dataset.argv(setup.source)
    if is_python(argv):
        argv = interposer.python_child(argv)
    lib = interposer.build()
    env = interposer.environment(out, kernels=kernels or h.m.kernels,
                                 max_instances=max_instances, skip=skip, sequence=sequence)
    extra = interposer.preload_env(lib, env, base=h.env(setup))
    ran = h.run(dataset, setup, extra_env={**env, "LD_PRELOAD": extra["LD_PRELOAD"]},
                argv=argv)
    _, problems = finalize_spool(out)
    units = sorted(p.parent for p in out.rglob("manifest.json") if SPOOL not in p.parts)
    return ran, units, problems


def _unit_kernel(unit: Path) -> tuple[str, str]:
    m = json.loads((unit / "manifest.json").read_text("utf-8"))
    kind = "native" if m.get("kind") == "native" else "source"
    return m["kernel"]["entry"], kind


def _unit_app_ms(unit: Path) -> float | None:
    m = json.loads((unit / "manifest.json").read_text("utf-8"))
    v = (m.get("capture") or {}).get("app_time_ms")
    return float(v) if isinstance(v, (int, float)) else None


def kernel_times(out: Path, units: list[Path]) -> list[dict[str, Any]]:
    """Per kernel: launches seen, the estimated total milliseconds in the application, its
    units and whether it has source (a Python capture) or only a module image (native)."""
    by_name: dict[str, dict[str, Any]] = {}

    def slot(name: str) -> dict[str, Any]:
        return by_name.setdefault(name, {"name": name, "seen": 0, "total_ms": None,
                                         "units": [], "kind": None, "timed_by": None})

    for s in spool_summaries(out):
        for k in s.get("kernels", []):
            d = slot(k["name"])
            d["seen"] = max(d["seen"], int(k.get("seen", 0)))
            if k.get("app_ms"):
                est = statistics.median(k["app_ms"]) * int(k.get("seen", 0))
                if d["total_ms"] is None or est > d["total_ms"]:
                    d["total_ms"], d["timed_by"] = est, "interposer (events)"
    for p in sorted((out / SPOOL).glob("inprocess-*.json")):
        for k in json.loads(p.read_text("utf-8")).get("kernels", []):
            d = slot(k["name"])
            d["seen"] = max(d["seen"], int(k.get("seen", 0)))
            if k.get("timed"):
                est = k["app_ms_total"] / k["timed"] * int(k.get("seen", 0))
                if d["total_ms"] is None or est > d["total_ms"]:
                    d["total_ms"], d["timed_by"] = est, "in-process capture"
    for u in units:
        name, kind = _unit_kernel(u)
        d = slot(name)
        d["units"].append(str(u))
        d["kind"] = kind
        if d["total_ms"] is None and (ms := _unit_app_ms(u)) is not None:
            d["total_ms"], d["timed_by"] = ms * max(1, d["seen"]), "the recorded launch"
    return sorted(by_name.values(), key=lambda d: -(d["total_ms"] or 0.0))


def ceiling_text(ceiling: float) -> str:
    """The Amdahl ceiling for reports: unbounded when the replaceable kernels are the whole
    timed run (a program timed by its own timer around its GPU loop)."""
    return "unbounded" if ceiling == float("inf") else f"{ceiling:.3g}x"


def shares(kernels: list[dict[str, Any]], run_s: float) -> dict[str, Any]:
    """Each kernel's share of the run; the share ``f`` of the replaceable ones (those with
    units) and the Amdahl ceiling ``1 / (1 - f)``."""
    for d in kernels:
        d["share"] = None if d["total_ms"] is None else min(1.0, d["total_ms"] / 1e3 / run_s)
    f = min(1.0, sum(d["share"] or 0.0 for d in kernels if d["units"]))
    return {"run_s": run_s, "kernels": kernels, "candidate_share": f,
            "ceiling": (1.0 / (1.0 - f)) if f < 1.0 else float("inf"),
            "units": sum(len(d["units"]) for d in kernels)}
