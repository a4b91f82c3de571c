"""Run the forge over (part of) the matrix: rounds, the final zero-regression pass, the logs.

Outputs (paths given by the caller; the repository keeps them under src/kernforge/stencil/data
and docs/stencil):

- the dispatch table (accepted design + parameters + prior best per cell), rewritten
  atomically after every acceptance;
- the performance log, one JSON line per gated candidate (accepted or rejected, with reason);
- the idea log, a markdown section per run: each round's idea and its outcome over the cells.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.paths import cache_path
from ..stencil.spec import Cell
from .compile import compile_all
from .final import regressions
from .ideas import describe
from .isolated import IsolatedSessions, Supervisor
from .journal import Journal, journaled
from .loop import Compiler, Forge, SessionFactory, check_plan, round_plan

EMULATE_MAX_POINTS = 1 << 16  # the emulator runs a host thread per CUDA thread


BUILDS = ("nvrtc", "nvcc")  # forge_run's build: how the rounds' candidates are compiled


def check_build(build: str) -> None:
    if build not in BUILDS:
        raise ConfigError(f"build {build!r}: one of {', '.join(BUILDS)}",
                          hint="nvrtc times what dispatch runs; nvcc uses precompiled cubins")


def default_compiler(cache: Path) -> Compiler:
    return lambda ops: compile_all(ops, cache)


def forge_run(cells: list[Cell], out: Path, *, start_table: Path | None, rounds: int,
              band: float = 0.02, emulate: bool = False, cache: Path | None = None,
              budget_s: float | None = None, changes: Sequence[str] | None = None,
              seed_design: str | None = None, say: Callable[[str], None] = print,
              build: str = "nvrtc", seeds: dict[str, str] | None = None,
              isolate: Supervisor | None = None, resume: bool = False,
              compiler: Compiler | None = None) -> dict[str, Any]:
    """A whole forge run into ``out`` (matrix.json, perf-log.jsonl, ideas.md,
    forge-summary.json, evaluations.jsonl), starting from ``start_table`` (the prior best) when
    it exists: on the GPU, or with ``emulate`` on the host emulator (small grids; timings
    meaningless).

    ``isolate``: the supervisor whose workers run every candidate (:mod:`.isolated`; None: in
    this process, for debugging). ``resume``: go on with the run journaled in ``out``
    (:mod:`.journal`: finished evaluations replayed, one that never finished quarantined); a
    fresh run when there is none. ``compiler``: the caller's own build of the rounds'
    candidates instead of ``build``'s (tests inject faulty operators through it).

    ``build``: "nvrtc" (default) builds candidates as dispatch does (:mod:`.nvrtc`, on the
    GPU machine), so the rounds time the deployed code; "nvcc" compiles cubins with nvcc
    (``cache``; can be precompiled on the host, ``kernforge stencil precompile``), and only the
    final pass times the deployed build."""
    import functools
    import shutil

    from ..core.jsonio import write_json_atomic

    check_plan(rounds, changes, seed_design, seeds, cells)
    check_build(build)
    if emulate and any(c.shape.points > EMULATE_MAX_POINTS for c in cells):
        raise ConfigError("the host emulator runs one thread per CUDA thread: grids of up to "
                          f"{EMULATE_MAX_POINTS} points only",
                          hint="pass small --shapes with --emulate, e.g. 40x20x16")
    out.mkdir(parents=True, exist_ok=True)
    table = out / "matrix.json"
    plan = {"cells": [c.id for c in cells], "rounds": round_plan(rounds, changes),
            "band": band, "seed_design": seed_design, "seeds": dict(seeds or {}),
            "build": build, "emulate": emulate}
    journal = Journal(out / "evaluations.jsonl", plan, resume)
    if journal.resumed:
        say(f"resuming the run in {out}: {len(journal.past)} journaled evaluations replayed")
        _restart(out, journal.header)
    else:
        if start_table is not None and start_table.exists() \
                and start_table.resolve() != table.resolve():
            shutil.copy(start_table, table)
        _snapshot(out, journal)
    if emulate:
        from .sessions import emulated_compiler, emulated_sessions

        sessions: SessionFactory = emulated_sessions
        final: Compiler | None = None  # one build on the host: the rounds' is deployed
        rounds_compiler: Compiler = emulated_compiler
        device = "host emulator"
        if isolate is not None:
            sessions = IsolatedSessions(isolate, "emulated")
    else:
        from .sessions import gpu_sessions

        if isolate is not None:  # this process needs no device context of its own
            sessions = IsolatedSessions(isolate, "gpu")
            ident = sessions.identity()
        else:
            from .measure import GpuDevice

            gpu = GpuDevice()
            ident = gpu.identity()
            sessions = functools.partial(gpu_sessions, gpu)
        device = str(ident.get("device", ident.get("name", "cuda")))
        from .nvrtc import build_deployed

        if build == "nvrtc":  # the rounds time the deployed build: the final pass too
            final, rounds_compiler = None, build_deployed
        else:  # nvcc cubins in the rounds; the final pass times the deployed (NVRTC) build
            final = build_deployed
            rounds_compiler = default_compiler(cache or cache_path("cubins"))
    summary = forge_matrix(cells, sessions=sessions, final_compiler=final,
                           compiler=compiler or rounds_compiler,
                           table_path=table,
                           perf_log=out / "perf-log.jsonl", idea_log=out / "ideas.md",
                           rounds=rounds, band=band, device=device, budget_s=budget_s,
                           changes=changes, seed_design=seed_design, say=say, seeds=seeds,
                           journal=journal)
    write_json_atomic(out / "forge-summary.json", summary)
    return summary


_LOGS = ("perf-log.jsonl", "ideas.md")


def _snapshot(out: Path, journal: Journal) -> None:
    """A fresh run's start (its table, its logs' sizes), for a later ``--resume``."""
    import shutil

    start = out / "start-matrix.json"
    if (out / "matrix.json").exists():
        shutil.copy(out / "matrix.json", start)
    else:
        start.unlink(missing_ok=True)
    sizes = {name: (out / name).stat().st_size if (out / name).exists() else 0
             for name in _LOGS}
    journal.write_header(logs=sizes)


def _restart(out: Path, header: dict[str, Any]) -> None:
    """The run's directory as the journaled run started: its start table back, the lines its
    logs got since cut (the replay writes them again)."""
    import shutil

    start = out / "start-matrix.json"
    if start.exists():
        shutil.copy(start, out / "matrix.json")
    else:
        (out / "matrix.json").unlink(missing_ok=True)
    for name, size in (header.get("logs") or {}).items():
        path = out / name
        if path.exists() and path.stat().st_size > size:
            with open(path, "r+b") as fh:
                fh.truncate(size)


def forge_matrix(cells: list[Cell], *, sessions: SessionFactory, compiler: Compiler,
                 table_path: Path, perf_log: Path, idea_log: Path, rounds: int = 6,
                 band: float = 0.02, device: str = "", budget_s: float | None = None,
                 changes: Sequence[str] | None = None, seed_design: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] = print,
                 final_compiler: Compiler | None = None,
                 seeds: dict[str, str] | None = None,
                 journal: Journal | None = None) -> dict[str, Any]:
    """Forge ``rounds`` rounds over ``cells``; returns a summary (also appended to the idea log).

    With ``budget_s``, a round starts only when, judged by the rounds so far, it and the final
    zero-regression pass still end inside the budget (so a time-boxed run always ends with the
    pass and its logs instead of being killed mid-round). ``final_compiler``: the final pass's
    builds when the rounds do not measure the deployed build (:class:`Forge`). ``journal``:
    every evaluation journaled (and a resumed run's replayed, :mod:`.journal`); ``sessions``
    must then take ``seed=`` as the built-in factories do.
    """
    check_plan(rounds, changes, seed_design, seeds, cells)
    if journal is not None:
        sessions = journaled(journal, sessions)
    forge = Forge(cells, table_path, perf_log, compiler, sessions, band=band, device=device,
                  say=say, seed_design=seed_design, seeds=dict(seeds or {}), clock=clock,
                  final_compiler=final_compiler)
    outcome: list[tuple[int, str, dict[str, int]]] = []
    t0, took = clock(), list[float]()
    forge.deadline = t0 + budget_s if budget_s is not None else None
    stopped: str | None = None
    for rnd, change in enumerate(round_plan(rounds, changes), start=1):
        if budget_s is not None and took:
            recent = took[1:][-2:] or took  # the design round (the first) is the longest
            need = max(recent) + 0.5 * sum(took) / len(took)  # a round, then the final pass
            if clock() - t0 + need > budget_s:
                stopped = (f"time budget: {clock() - t0:.0f} of {budget_s:.0f} s spent, the "
                           f"next round and the final pass need ~{need:.0f} s")
                say(f"stopping before round {rnd} ({change}): {stopped}")
                break
        t_round = clock()
        counts = forge.run_round(rnd, change)
        took.append(clock() - t_round)
        outcome.append((rnd, change, counts))
        say(f"round {rnd} ({change}): {counts} in {took[-1]:.0f} s")
    final = regressions(forge)
    forge.settle(final)  # commit or revert: regressed cells and losing seeds get their entry back
    for rec in final:
        if rec.get("reverted"):
            seed = forge.seeds.get(rec["cell"], forge.seed_design)
            what = (f"the seeded {seed} did not beat the table's operator by the gate's rule"
                    if rec.get("seeded") else "regressed in the final pass")
            say(f"{rec['cell']}: {what}; its entry from before this run is restored")
    judged = {rec["cell"] for rec in final}
    for cid in sorted(forge.seeded - judged):  # no round measured it: nothing to judge
        say(f"{cid}: the seeded {forge.seeds.get(cid, forge.seed_design)} was never measured "
            f"(no round had a candidate for it); its table entry is unchanged")
    bad = [r for r in final if r["regressed"]]
    quarantined = journal.quarantined if journal is not None else []
    for q in quarantined:
        say(f"{q['cell']}: {' '.join(q['evaluation'])} never finished in the run being resumed: "
            f"quarantined (RUNTIME_FAILED), not run again")
    _append_ideas(idea_log, outcome, final, device, len(cells), stopped)
    return {"rounds": [{"round": r, "change": c, **k} for r, c, k in outcome],
            "seconds": [round(t, 1) for t in took], "stopped": stopped,
            "final": final, "regressed": [r["cell"] for r in bad],
            "quarantined": quarantined}


def _append_ideas(path: Path, outcome: list[tuple[int, str, dict[str, int]]],
                  final: list[dict[str, Any]], device: str, ncells: int,
                  stopped: str | None = None) -> None:
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="minutes")
    lines = [f"\n## Forge run {stamp} on {device or 'unknown device'} ({ncells} cells)\n",
             "| round | idea | accepted | rejected | unchanged |", "|---:|---|---:|---:|---:|"]
    for rnd, change, k in outcome:
        lines.append(f"| {rnd} | {change}: {describe(change)} | {k['accepted']} | "
                     f"{k['rejected']} | {k['unchanged']} |")
    if stopped:
        lines.append(f"\nStopped early ({stopped}).")
    regressed = [r["cell"] for r in final if r["regressed"]]
    changed = sum(1 for r in final if r.get("changed"))
    drift = [r["cell"] for r in final if r.get("drift")]
    build = (" in the deployed build (NVRTC)" if any(r.get("build") == "deployed" for r in final)
             else "")
    lines.append(f"\nZero-regression pass: {len(final)} accepted cells re-checked against the "
                 f"oracle, the {changed} changed this run compared interleaved with their "
                 f"starting operator{build}; {len(regressed)} regressed"
                 f"{': ' + ', '.join(regressed) if regressed else ''}.")
    reverted = [r["cell"] for r in final if r.get("reverted")]
    if reverted:
        lines.append(f"Reverted to the entry from before this run (a seeded design that did not "
                     f"beat it, or a regression) ({len(reverted)}): {', '.join(reverted)}.")
    if drift:
        lines.append(f"Unchanged operators slower than their recorded time (drift, not a "
                     f"verdict): {', '.join(drift)}.")
    lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write("\n".join(lines))
