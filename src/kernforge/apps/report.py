"""``kernforge app report DIR... -o REPORT.md``: every application's state, reason and figures,
a summary table like ForgeStencil's (applications per state, the median end-to-end speedup of
the integrated ones beside ForgeStencil's 1.41x), and a PNG beside the report: the speedup of
every application on every dataset, colored by state."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..harness.verdict import ci_label
from .one_launch import counts_text
from .recording import ceiling_text
from .store import DB_NAME, STATES, AppState, AppStore, Milestone

FORGESTENCIL_MEDIAN = 1.41
COLORS = {"INTEGRATED": "#55a868", "DROPPED": "#c44e52", "RESEARCH": "#8172b3",
          "INCONCLUSIVE": "#ccb974",
          "OUT_OF_SCOPE": "#8c8c8c", "BLOCKED": "#dd8452", "PENDING": "#cccccc"}


@dataclass(frozen=True)
class AppResult:
    out: Path
    app: AppState
    milestones: dict[str, Milestone]

    @property
    def m4(self) -> dict[str, Any]:
        m = self.milestones.get("M4")
        return m.figures if m is not None else {}

    @property
    def geomean(self) -> float | None:
        g = self.m4.get("geomean")
        return float(g) if isinstance(g, (int, float)) else None


def load(out: Path) -> AppResult:
    if not (out / DB_NAME).is_file():
        raise ConfigError(f"{out} holds no application run ({DB_NAME} missing)",
                          hint="give directories written by kernforge app run --out")
    store = AppStore.open(out)
    try:
        app = store.app()
        if app is None:
            raise ConfigError(f"{out}: the run database is empty", hint="run it again")
        return AppResult(out, app, {m.name: m for m in store.milestones()})
    finally:
        store.close()


def _cell(text: str, n: int) -> str:
    """Text for one Markdown table cell: one line, no column separators, at most ``n``."""
    one = " ".join(text.replace("|", "/").split())
    return one if len(one) <= n else one[:n - 3] + "..."


def _ci(d: dict[str, Any]) -> str:
    """A dataset's sign-test interval at its confidence, or the geometric mean's 95%
    bootstrap interval."""
    if d.get("ci"):
        ci, label = d["ci"], ci_label(d.get("confidence"))
    else:
        ci, label = d.get("geomean_ci"), "95% bootstrap CI"
    return f" [{label} {ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def summary_rows(results: list[AppResult]) -> list[str]:
    counts = {s: sum(1 for r in results if r.app.state == s) for s in STATES}
    integ = [g for r in results if r.app.state == "INTEGRATED" and (g := r.geomean)]
    med = f"{statistics.median(integ):.2f}x" if integ else "-"
    lines = ["| | kernforge | ForgeStencil |", "|---|---|---|",
             f"| applications | {len(results)} | 100 |"]
    lines += [f"| {s} | {counts[s]} | |" for s in STATES if counts[s] or s != "PENDING"]
    lines.append(f"| median end-to-end speedup of INTEGRATED (geometric mean over each "
                 f"application's datasets) | {med} | {FORGESTENCIL_MEDIAN:.2f}x |")
    return lines


def _share(r: AppResult) -> str:
    m2 = r.milestones.get("M2")
    if m2 is None or "candidate_share" not in m2.figures:
        return "-"
    f = m2.figures
    return f"{100 * f['candidate_share']:.1f} % (ceiling {ceiling_text(f['ceiling'])})"


def _how(r: AppResult) -> str:
    """The strategies that integrated the application; nothing when it was not integrated
    (a DROPPED run's strategies produced what the end-to-end gate refused)."""
    m3 = r.milestones.get("M3")
    used = ", ".join(m3.figures.get("used", [])) if m3 is not None else ""
    if not used:
        return "-"
    return used if r.app.state == "INTEGRATED" else f"{used} ({r.app.state.lower()})"


def in_flight(r: AppResult) -> Milestone | None:
    """The milestone a run left RUNNING (killed or interrupted in it, or still running)."""
    return next((m for m in r.milestones.values() if m.status == "RUNNING"), None)


def state_reason(r: AppResult) -> tuple[str, str]:
    """The state and reason to show: a run stopped in a milestone says which, not the
    PENDING row's "not started"."""
    m = in_flight(r)
    if m is None or r.app.state != "PENDING":
        return r.app.state, r.app.reason
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.started))
    return r.app.state, (f"{m.name} RUNNING since {when}: the run was interrupted in it (or "
                         f"is still running); kernforge app run --resume continues it")


def app_section(r: AppResult) -> list[str]:
    state, reason = state_reason(r)
    m = in_flight(r)
    m1 = r.milestones.get("M1")
    timed = m1.figures.get("timed_by") if m1 is not None else None
    out = [f"## {r.app.name}: {state}" + (f" ({m.name} in flight)" if m else ""), "", reason,
           "",
           f"Run directory: `{r.out}`" + (f"; time read from {timed}" if timed else ""), "",
           "| milestone | status | reason |", "|---|---|---|"]
    for name in sorted(r.milestones):
        m = r.milestones[name]
        out.append(f"| {name} | {m.status} | {_cell(m.reason, 600)} |")
    out += dataset_table(r)
    for note in (r.m4.get("integration") or {}).get("dropped", []):
        out += ["", f"- not deployed: {_cell(note, 300)}"]
    return out + [""]


def dataset_table(r: AppResult) -> list[str]:
    """M4's figures per dataset: the times and the speedup; with a one-launch arm its
    speedup and the fused integration's against it; with a fused entry the interposer's
    counts of the dataset's last run (:func:`.one_launch.counts_text`)."""
    per = r.m4.get("datasets") or []
    if not per:
        return []
    arm = any("one_launch" in d for d in per)
    fused = any(d.get("fused") for d in per)
    cols = ["dataset", "original", "with kernforge", "speedup [CI]"]
    cols += ["one-launch arm [CI]", "fused against one-launch [CI]"] if arm else []
    cols += ["interposer's fusion (last run)"] if fused else []
    out = ["", _cells(cols), "|" + "---|" * len(cols)]
    for d in per:
        row = [d["dataset"], f"{d['original_s']:.4g} s", f"{d['deployed_s']:.4g} s",
               f"{d['speedup']:.3f}x{_ci(d)}"]
        if arm:
            row += [f"{x['speedup']:.3f}x{_ci(x)}" if (x := d.get(k)) else "-"
                    for k in ("one_launch", "against_one_launch")]
        if fused:
            row.append(counts_text(d) or "-")
        out.append(_cells(row))
    if r.geomean is not None:
        g = ["geometric mean", "", "", f"{r.geomean:.3f}x{_ci(r.m4)}"]
        if arm:
            o = r.m4.get("one_launch") or {}
            g += [f"{x['geomean']:.3f}x{_ci(x)}" if (x := o.get(k)) else "-"
                  for k in ("one_launch", "against_one_launch")]
        out.append(_cells(g + [""] * (len(cols) - len(g))))
    return out


def _cells(cells: list[str]) -> str:
    """One Markdown table row (an empty cell as ``| |``)."""
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def plot(results: list[AppResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 0.9 * len(results)), 4.2))
    x = 0.0
    ticks, labels = [], []
    for r in results:
        per = r.m4.get("datasets") or []
        color = COLORS.get(r.app.state, "#cccccc")
        if per:
            w = 0.8 / len(per)
            for i, d in enumerate(per):
                lo, hi = d["ci"]
                ax.bar(x + i * w, d["speedup"], w * 0.9, color=color,
                       yerr=[[d["speedup"] - lo], [hi - d["speedup"]]], capsize=2)
                ax.text(x + i * w, 0.02, d["dataset"][:10], rotation=90, fontsize=6,
                        ha="center", va="bottom", transform=ax.get_xaxis_transform())
            ticks.append(x + 0.4 - w / 2)
        else:
            ax.text(x, 1.0, r.app.state, rotation=90, fontsize=7, ha="center", va="bottom",
                    color=color)
            ticks.append(x)
        labels.append(r.app.name[:18])
        x += 1.2
    ax.set_xlim(-0.7, x - 0.3)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(0.98, color="#c44e52", lw=0.8, ls=":", label="floor 0.98x")
    ax.axhline(FORGESTENCIL_MEDIAN, color="#4c72b0", lw=0.8, ls="--",
               label=f"ForgeStencil median {FORGESTENCIL_MEDIAN}x")
    ax.set_xticks(ticks, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("end-to-end speedup (median of interleaved rounds)", fontsize=8)
    handles = [Patch(color=c, label=s) for s, c in COLORS.items()
               if any(r.app.state == s for r in results)]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=7,
              loc="best")
    ax.set_title("applications: speedup per dataset, by state", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(dirs: list[Path], out: Path) -> tuple[Path, Path]:
    """The Markdown report at ``out`` and its chart beside it (``<stem>.png``)."""
    results = [load(d) for d in dirs]
    out.parent.mkdir(parents=True, exist_ok=True)
    png = plot(results, out.with_suffix(".png"))
    lines = ["# Applications", "",
             (f"Written {time.strftime('%Y-%m-%d %H:%M')} by `kernforge app report` from "
             f"{len(results)} run(s)."), "", *summary_rows(results), "",
             f"![speedup per application and dataset]({png.name})", "",
             ("| application | state | replaceable share (Amdahl ceiling) | integrated by | "
             "end-to-end speedup (geometric mean) | reason |"), "|---|---|---|---|---|---|"]
    for r in results:
        g = f"{r.geomean:.3f}x{_ci(r.m4)}" if r.geomean is not None else "-"
        state, reason = state_reason(r)
        m = in_flight(r)
        if m is not None:
            state = f"{state} ({m.name} RUNNING)"
        lines.append(f"| {r.app.name} | {state} | {_share(r)} | {_how(r)} | {g} | "
                     f"{_cell(reason, 240)} |")
    lines.append("")
    for r in results:
        lines += app_section(r)
    out.write_text("\n".join(lines), "utf-8")
    return out, png
