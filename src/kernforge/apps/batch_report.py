"""The summary of a batch (``kernforge app batch``, at its end and with ``--status``): per
program its outcome with the reason and its end-to-end speedup, the median over the
integrated ones, the device time; and the batch's exit status."""

from __future__ import annotations

import statistics

from .batch_store import OUTCOMES, Program
from .budget import format_duration
from .report import _cell

UNFINISHED = ("PENDING", "RUNNING", "STOPPED")


INTERRUPTED = ("interrupted with its batch (Ctrl-C or killed): the same kernforge app batch "
               "command goes on with it")


def outcome(p: Program, live: bool = True) -> str:
    """What the table shows: the outcome, or where an unfinished program stands (RUNNING
    only while a batch runs: ``live``; else it was INTERRUPTED)."""
    if p.outcome:
        return p.outcome
    if p.status == "RUNNING":
        return "RUNNING" if live else "INTERRUPTED"
    return "PENDING"


def summary_lines(programs: list[Program], *, budget_s: float | None, spent_s: float,
                  program_budget_s: float | None = None, live: bool = True,
                  total_s: float | None = None) -> list[str]:
    """A Markdown table (readable as plain text) and the totals; ``spent_s`` of the latest
    allocation's ``budget_s``, ``total_s`` over all the batch's runs (said when more);
    ``live``: whether a batch is running them now."""
    lines = ["| program | outcome | app state | speedup | device time | reason |",
             "|---|---|---|---|---|---|"]
    for p in programs:
        g = f"{p.speedup:.3f}x" if p.speedup is not None else "-"
        shown = outcome(p, live)
        why = INTERRUPTED if shown == "INTERRUPTED" else p.reason
        lines.append(f"| {p.name} | {shown} | {p.app_state or '-'} | {g} | "
                     f"{format_duration(p.spent_s)} | {_cell(why, 200)} |")
    counts = {o: sum(1 for p in programs if p.outcome == o) for o in OUTCOMES}
    integ = [p.speedup for p in programs if p.outcome == "INTEGRATED" and p.speedup]
    med = f"{statistics.median(integ):.3f}x" if integ else "-"
    left = [p.name for p in programs if p.status in UNFINISHED]
    parts = [f"{n} {o}" for o, n in counts.items() if n]
    parts += [f"{len(left)} not finished"] if left else []
    lines += ["", f"{len(programs)} program(s)" + (": " + ", ".join(parts) if parts else ""),
              f"median end-to-end speedup of the {len(integ)} INTEGRATED: {med}"]
    spent = f"device time {format_duration(spent_s)}"
    if budget_s is not None:
        spent += f" of a {format_duration(budget_s)} budget"
    if program_budget_s is not None:
        spent += f" (at most {format_duration(program_budget_s)} a program)"
    if total_s is not None and round(total_s) > round(spent_s):
        spent += f"; {format_duration(total_s)} over all the batch's runs"
    lines.append(spent)
    return lines


def exit_status(programs: list[Program]) -> int:
    """2 when a manifest does not load; 1 when programs are left unfinished (the budget is
    spent); 9 when all finished and one is INCONCLUSIVE; else 0 (every outcome, FAILED
    included, is a result of the batch)."""
    if any(p.status == "INVALID" for p in programs):
        return 2
    if any(p.status in UNFINISHED for p in programs):
        return 1
    if any(p.outcome == "INCONCLUSIVE" for p in programs):
        return 9
    return 0
