"""The charts of the tuner's and the evolution's reports (matplotlib, Agg).

Both show what was measured and nothing else: one point per evaluation (a cache hit is not an
evaluation and is not drawn; the caption counts them), failures apart, the best so far as a
line, the reference (the recorded configuration, or the seed program) as a line at its own
measured median, and the interleaved figure in the title, since that, not the ratio of two
points of the chart, is the speedup kernforge reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ISLAND_COLORS = ("#4c72b0", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _running_min(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    best, run = [], float("inf")
    for x, y in sorted(points):
        run = min(run, y)
        best.append((x, run))
    return best


def _finish(fig: Any, ax: Any, path: Path, title: str, xlabel: str, ylabel: str,
            ys: Sequence[float]) -> Path:
    if ys and max(ys) / max(min(ys), 1e-30) > 20:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt = _plt()
    plt.close(fig)
    return path


def best_so_far_png(path: Path, ok: Sequence[tuple[float, float]], bad: Sequence[float], *,
                    ok_label: str, bad_label: str, xlabel: str, ylabel: str, title: str,
                    extra: Callable[[Any], None] | None = None) -> Path:
    """Verified points (x, time) as dots with their running minimum as a step line; failed
    attempts (x only) as crosses at the top of the verified range; ``extra(ax)`` adds more."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ys: list[float] = []
    if ok:
        xs, ys_t = zip(*ok, strict=True)
        ys = list(ys_t)
        ax.scatter(xs, ys, s=16, color="#4c72b0", label=ok_label, zorder=3)
        ax.step(*zip(*_running_min(ok), strict=True), where="post", color="#dd8452", lw=2,
                label="best so far", zorder=2)
        if bad:
            ax.scatter(bad, [max(ys)] * len(bad), marker="x", color="#c44e52", label=bad_label,
                       zorder=3)
    if extra is not None:
        extra(ax)
    return _finish(fig, ax, path, title, xlabel, ylabel, ys)


def tuning_png(path: Path, evaluations: Sequence[tuple[int, float | None]], *,
               recorded_s: float | None, cache_hits: int, title: str) -> Path:
    """One point per evaluation (number, median seconds; None = failed), the best so far,
    and the recorded configuration as a dashed line at its measured median."""

    def recorded(ax: Any) -> None:
        if recorded_s:
            ax.axhline(recorded_s * 1e3, ls="--", color="#555", lw=1.2,
                       label=f"recorded configuration ({recorded_s * 1e3:.3g} ms, its "
                             f"measured median)")

    ok = [(n, m * 1e3) for n, m in evaluations if m is not None]
    bad = [n for n, m in evaluations if m is None]
    return best_so_far_png(
        path, ok, bad, ok_label="evaluation: compiled, verified, timed (median)",
        bad_label="failed (compile, launch or wrong result)",
        xlabel=f"evaluation ({len(evaluations)} evaluations; {cache_hits} cache hits of "
               f"repeated configurations not drawn)",
        ylabel="median replay time (ms)", title=title, extra=recorded)


def evolution_png(path: Path, points: Sequence[tuple[float, float | None, int]], *,
                  seed_s: float | None, title: str) -> Path:
    """Every evaluated program: (seconds since the start, fitness seconds or None when it was
    rejected, island), coloured by island; the best so far over all islands as a line from
    the first verified program to the end of the run; the seed program as a dashed line at
    its fitness."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    fits = [f for _, f, _ in points if f is not None] + ([seed_s] if seed_s else [])
    scale, unit = (1e3, "ms") if fits and max(fits) >= 1e-3 else (1e6, "us")
    ok = [(t, f * scale) for t, f, _ in points if f is not None]
    ys = [y for _, y in ok]
    top = max(ys) if ys else 1.0
    end = max([t for t, _, _ in points] or [1.0]) * 1.05 + 0.5
    for island in sorted({i for _, _, i in points}):
        color = ISLAND_COLORS[island % len(ISLAND_COLORS)]
        good = [(t, f * scale) for t, f, i in points if i == island and f is not None]
        bad = [t for t, f, i in points if i == island and f is None]
        if good:
            ax.scatter(*zip(*good, strict=True), s=18, color=color, zorder=3,
                       label=f"island {island}: verified program ({len(good)})")
        if bad:
            ax.scatter(bad, [top] * len(bad), marker="x", s=22, color=color, zorder=3,
                       label=f"island {island}: rejected ({len(bad)}, drawn at the top)")
    if ok:
        best = _running_min(ok)
        best.append((end, best[-1][1]))
        ax.step(*zip(*best, strict=True), where="post", color="#dd8452", lw=2,
                label="best so far", zorder=2)
    if seed_s:
        ax.axhline(seed_s * scale, ls="--", color="#555", lw=1.2,
                   label=f"seed: the recorded kernel ({seed_s * scale:.4g} {unit})")
    ax.set_xlim(0, end)
    return _finish(fig, ax, path, title, "seconds since the run started",
                   f"fitness: tuned median time ({unit})", ys)
