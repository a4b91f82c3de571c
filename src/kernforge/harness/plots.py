"""The best-so-far chart shared by the tuner's and the evolution's reports (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def best_so_far_png(path: Path, ok: Sequence[tuple[float, float]], bad: Sequence[float], *,
                    ok_label: str, bad_label: str, xlabel: str, ylabel: str, title: str,
                    extra: Callable[[Any], None] | None = None) -> Path:
    """Verified points (x, time) as dots with their running minimum as a step line; failed
    attempts (x only) as crosses at the top of the verified range; ``extra(ax)`` adds more."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    if ok:
        xs, ys = zip(*ok, strict=True)
        ax.scatter(xs, ys, s=13, color="#4c72b0", label=ok_label)
        best, run = [], float("inf")
        for x, y in ok:
            run = min(run, y)
            best.append((x, run))
        ax.step(*zip(*best, strict=True), where="post", color="#dd8452", label="best so far")
        if bad:
            ax.scatter(bad, [max(ys)] * len(bad), marker="x", color="#c44e52", label=bad_label)
    if extra is not None:
        extra(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
