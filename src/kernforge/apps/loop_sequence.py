"""M3a's time loops: a kernel's launches recorded as one sequence unit, for fusion.

M2 records one launch per kernel and dataset; fusion of whole steps (a stencil and the
launches between two of its launches: boundary kernels folded, per-step diagnostics elided,
:func:`kernforge.apps.operator_match.fuse_unit`) needs the step as the program runs it. The
interposer records either one-launch units or sequences in a process (``KERNFORGE_SEQUENCE``
holds for every recorded kernel, and one sequence is open at a time), so the sequence is one
more run of the dataset under the recorder, of the one kernel (its name as the kernel filter):
:data:`SKIP` launches left alone, then :func:`sequence_length` launches of the kernel and every
launch between them. It is recorded for a unit whose kernel M2 saw launched at least
:func:`needed_launches` times in the recorded dataset and that is the hottest such kernel
(:func:`loop_kernels`; the stencil of a time loop outweighs its boundary and diagnostic
kernels), or that the one-launch matcher recognized as a stencil. Its cost: one run of that
dataset with the recorder (the recorded launches synchronize and copy the buffers they touch
twice), per such unit.

A sequence the program ended early (a copy, a synchronization, an event... between steps:
``sequence.ended``) holds fewer steps; the interposer, which flushes held launches at the same
calls, could then fuse no more steps than it holds (:func:`fusable_steps`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..core import KernforgeError
from ..record.native_format import read_native
from .harness import AppHarness
from .recording import record_dataset

SKIP = 2  # launches of the kernel left alone first (the first may run after compilation)


def sequence_length(steps: tuple[int, ...] | None = None) -> int:
    """S = max T + 2 launches of the kernel: T + 1 whole steps (T fused and the step the
    interposer holds after them, which elided diagnostics need)."""
    from .fused import STEPS

    return max(steps or STEPS) + 2


def needed_launches(steps: tuple[int, ...] | None = None) -> int:
    """Launches of a kernel that make it a time loop worth recording: :data:`SKIP`, then
    T + 1 for the smallest T (the interposer holds T + 1 before it runs a fused launch); a
    shorter loop than :func:`sequence_length` ends its sequence early, with fewer T."""
    from .fused import STEPS

    return SKIP + min(steps or STEPS) + 1


def loop_kernels(kernels: list[dict[str, Any]], steps: tuple[int, ...] | None = None
                 ) -> set[str]:
    """The hottest native kernel with units that M2 saw launched often enough for a
    sequence (a set of at most one name; empty when none was)."""
    need = needed_launches(steps)
    loops = [k for k in kernels if k.get("kind") == "native" and k.get("units")
             and int(k.get("seen") or 0) >= need]
    if not loops:
        return set()
    hot = max(loops, key=lambda k: (k.get("total_ms") or 0.0, int(k.get("seen") or 0)))
    return {str(hot["name"])}


def why_not(k: dict[str, Any], loops: set[str], recognized: bool,
            steps: tuple[int, ...] | None = None) -> str | None:
    """Why no sequence is recorded for kernel ``k`` (None: it is): too few launches, or
    neither the time loop's hottest kernel nor a recognized stencil."""
    need, seen = needed_launches(steps), int(k.get("seen") or 0)
    if seen < need:
        return (f"not recorded: {seen} launch(es) in the recorded run; a time loop worth "
                f"fusing has at least {need} ({SKIP} left alone, then T + 1 for T = "
                f"{need - SKIP - 1})")
    if k["name"] not in loops and not recognized:
        return ("not recorded: neither the hottest kernel launched in a loop ("
                + (", ".join(sorted(loops)) or "none") + ") nor a recognized stencil")
    return None


def glob_escape(name: str) -> str:
    """``name`` as an fnmatch pattern that matches only itself (the interposer's filter)."""
    return re.sub(r"([\\*?\[])", r"\\\1", name)


def record(h: AppHarness, unit: Path, kernel: str, out: Path,
           steps: tuple[int, ...] | None = None) -> Path | str:
    """The sequence unit of ``kernel`` recorded in one run of the dataset ``unit`` was
    recorded on (its folder's name) into ``out``, or why there is none."""
    name = unit.parent.name
    try:
        dataset = h.m.dataset(name)
    except KernforgeError:
        return f"not recorded: no dataset {name!r} in the manifest"
    try:
        ran, units, problems = record_dataset(h, dataset, out, kernels=glob_escape(kernel),
                                              skip=SKIP, sequence=sequence_length(steps))
    except KernforgeError as exc:
        return f"not recorded: {exc.message.strip().splitlines()[0]}"
    if ran.returncode != 0:
        return f"not recorded: the program failed under the sequence recorder ({ran.ended})"
    v = h.check(dataset, h.original(), ran)
    if not v.ok:
        return f"not recorded: under the sequence recorder the program fails its check: " \
               f"{v.reason}"
    for u in units:
        try:
            rec = read_native(u)
        except KernforgeError:
            continue
        if rec.is_sequence and rec.entry == kernel:
            return u
    why = "; ".join(problems[:2]) or f"no sequence of {kernel} was recorded"
    return f"not recorded: {why}"


def summary(unit: Path) -> dict[str, Any]:
    """What the sequence holds: its unit, the launches of its kernel (``steps``), why it
    ended, and the other kernels launched between them (a step's companions)."""
    rec = read_native(unit)
    others = list(dict.fromkeys(s.entry for s in rec.steps if not rec.of_kernel(s)))
    return {"unit": str(unit), "steps": int(rec.sequence.get("steps") or 0),
            "requested": int(rec.sequence.get("requested") or 0),
            "ended": str(rec.sequence.get("ended") or ""), "launches": len(rec.steps),
            "other_kernels": others}


def fusable_steps(held: int, steps: tuple[int, ...] | None = None
                  ) -> tuple[tuple[int, ...], str | None]:
    """The fused step counts T a sequence of ``held`` launches of the kernel allows (T + 1 of
    them held by the interposer before a group runs), and why none when it allows none."""
    from .fused import STEPS

    ok = tuple(t for t in steps or STEPS if t + 1 <= held)
    if ok:
        return ok, None
    return (), (f"the program ran {held} launch(es) of the kernel before something observed "
                f"memory or the loop ended; the interposer holds T + 1 (T >= "
                f"{min(steps or STEPS)}) before it runs a fused launch")
