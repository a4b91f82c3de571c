"""The report of an evolution run, read back from its store: lineage of the best kernel with
unified diffs, time split (LLM, compile, evaluation), evaluations per hour, and a PNG of the
best-so-far fitness over time. Written as ``report.md``, ``report.json`` and
``best_so_far.png`` in the run directory."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..evolve.store import Store
from ..evolve.types import Program
from ..harness.plots import evolution_png
from ..harness.verdict import ci_label
from .evolve_final import measurement_text

if TYPE_CHECKING:
    from .evolve_final import Final


@dataclass
class Report:
    kernel: str
    speedup: float
    status: str
    programs: int
    evaluations: int
    evaluations_failed: int
    llm_calls: int
    llm_errors: int
    wall_s: float
    llm_s: float
    compile_s: float
    evaluation_s: float
    evaluations_per_hour: float
    lineage: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    # why proposer calls gave no usable code: (first line of the error, calls), commonest first
    llm_error_kinds: list[tuple[str, int]] = field(default_factory=list)


def error_kinds(calls: list[dict[str, Any]], most: int = 3) -> list[tuple[str, int]]:
    """The commonest reasons proposer calls failed, by the first line of their error."""
    count = Counter(str(c["error"]).strip().splitlines()[0][:300] if str(c["error"]).strip()
                    else "(no message)" for c in calls if c["error"] is not None)
    return count.most_common(most)


def lineage(programs: dict[str, Program], best_id: str | None) -> list[dict[str, Any]]:
    """Seed first, best last; each step with its unified diff from its parent."""
    chain: list[Program] = []
    pid = best_id
    while pid is not None and pid in programs and len(chain) < 10_000:
        chain.append(programs[pid])
        pid = programs[pid].parent_id
    chain.reverse()
    out = []
    for parent, child in zip([None, *chain[:-1]], chain):
        diff = "" if parent is None else "".join(difflib.unified_diff(
            parent.code.splitlines(True), child.code.splitlines(True),
            f"{parent.id}", f"{child.id}"))
        out.append({"id": child.id, "parent": parent.id if parent else None,
                    "fitness": child.fitness, "generation": child.generation, "diff": diff})
    return out


def _timings(store: Store) -> tuple[int, int, float, float,
                                    list[tuple[float, float | None, int]]]:
    """(evaluations, failed, compile seconds, evaluation seconds, [(finished, fitness or None
    when rejected, island)])."""
    rows = store.conn.execute(
        "SELECT e.started, e.finished, e.extra, e.fitness, e.passed_all, "
        "COALESCE(i.island, p.island, 0) FROM evaluations e "
        "LEFT JOIN iterations i ON i.iteration = e.iteration "
        "LEFT JOIN programs p ON p.id = e.program_id ORDER BY e.finished").fetchall()
    compile_s = eval_s = 0.0
    points: list[tuple[float, float | None, int]] = []
    failed = 0
    for started, finished, extra, fitness, passed, island in rows:
        e = json.loads(extra)
        compile_s += float(e.get("compile_s", 0.0))
        eval_s += float(e.get("eval_s", (finished - started) if started else 0.0))
        failed += not passed
        points.append((finished, fitness if passed else None, int(island)))
    return len(rows), failed, compile_s, eval_s, points


def plot_best_so_far(points: list[tuple[float, float | None, int]], t0: float, path: Path,
                     title: str, seed_s: float | None = None) -> Path:
    """Every evaluated program over wall time, per island, and the best so far."""
    return evolution_png(path, [(t - t0, f, i) for t, f, i in points], seed_s=seed_s,
                         title=title)


def build_report(store: Store, kernel: str, final: Final) -> tuple[Report, list[Any]]:
    programs = {p.id: p for p in store.programs()}
    calls = store.llm_calls()
    n, failed, compile_s, eval_s, points = _timings(store)
    events = store.events()
    t0 = events[0]["ts"] if events else 0.0
    wall = (events[-1]["ts"] - t0) if events else 0.0
    best_id = final.best.id if final.best else None
    rep = Report(kernel=kernel, speedup=final.counted, status=final.status,
                 programs=len(programs), evaluations=n, evaluations_failed=failed,
                 llm_calls=len(calls), llm_errors=sum(c["error"] is not None for c in calls),
                 wall_s=wall, llm_s=sum(c["latency_s"] for c in calls), compile_s=compile_s,
                 evaluation_s=eval_s,
                 evaluations_per_hour=n / wall * 3600 if wall > 0 else 0.0,
                 lineage=lineage(programs, best_id), llm_error_kinds=error_kinds(calls))
    return rep, [points, t0]


def _markdown(r: Report, final: Final) -> str:
    lines = [f"# Evolution of `{r.kernel}`", "",
             (f"- verdict: {measurement_text(final)} (interleaved: the median of the per-pass "
              f"ratios); speedup counted: **{r.speedup:.3f}x**"),
             (f"- programs: {r.programs}; evaluations: {r.evaluations} "
             f"({r.evaluations_failed} rejected); proposer calls: {r.llm_calls} "
             f"({r.llm_errors} without usable code)"),
             *[f"- proposer error ({n} call{'s' if n > 1 else ''}): {why}"
               for why, n in r.llm_error_kinds],
             f"- wall time {r.wall_s:.1f} s; {r.evaluations_per_hour:.0f} evaluations/hour",
             (f"- time: LLM/proposers {r.llm_s:.1f} s, compile {r.compile_s:.1f} s, "
             f"evaluation (verify + tune + time, incl. compile) {r.evaluation_s:.1f} s"),
             f"- best configuration: {json.dumps(final.config)}", "",
             "## Lineage of the best kernel", ""]
    for step in r.lineage:
        fit = f"{step['fitness'] * 1e6:.2f} us" if step["fitness"] else "invalid"
        lines.append(f"### {step['id']} (generation {step['generation']}, {fit})")
        if step["diff"]:
            lines += ["```diff", step["diff"].rstrip(), "```"]
        lines.append("")
    lines.append("![best so far](best_so_far.png)")
    return "\n".join(lines) + "\n"


def write_report(store: Store, run_dir: Path, kernel: str, final: Final) -> Report:
    rep, (points, t0) = build_report(store, kernel, final)
    m = final.ab or final.measured
    said = final.speed.verdict.value if final.status in ("OK", "INCONCLUSIVE") and \
        final.speed is not None else final.status
    figure = (f"{said}: interleaved speedup {m.speedup:.3f}x [{ci_label(m.confidence)} "
              f"{m.ci_low:.3f}, {m.ci_high:.3f}] over the recorded kernel" if m is not None
              else f"{final.status}: no interleaved measurement")
    seeds = [p for p in store.programs() if p.parent_id is None and p.fitness]
    png = plot_best_so_far(points, t0, run_dir / "best_so_far.png",
                           f"evolution of {kernel}: {rep.evaluations} evaluated programs\n"
                           f"{figure}", seed_s=seeds[0].fitness if seeds else None)
    rep.files = {"report": str(run_dir / "report.md"), "png": str(png),
                 "store": str(run_dir / "evolve.db"),
                 "result": str(final.result_json) if final.result_json else ""}
    (run_dir / "report.md").write_text(_markdown(rep, final))
    tmp = run_dir / "report.json.tmp"
    tmp.write_text(json.dumps(asdict(rep), indent=2, default=str))
    tmp.replace(run_dir / "report.json")
    return rep
