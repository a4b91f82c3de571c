"""M4's one-launch arm: beside an integration that deploys a fused path (``fused``, ``fused
step``: T time steps run as one launch by the interposer's deferral) for some kernel, the same
integration with that kernel's one-launch spec in its place, run in the same interleaved
rounds (:meth:`.harness.AppHarness.compare` with ``also``). It answers what replay cannot:
whether fusing the steps pays end to end over replacing each launch, and, with the
interposer's counts of each dataset's last run, whether the deferral engaged at all.

M3a keeps every path it found per kernel (the row's ``alternatives``); rows written before it
did have none, and their kernels have no one-launch arm. The program's state is still judged
on the integration against the original; the arm adds figures and words, and deploys nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..harness.verdict import CONFIDENCE, judge
from .harness import Setup, geomean_ci, round_geomeans
from .strategies import Outcome

FUSED = ("fused", "fused step")  # M3a's path keys whose spec the interposer defers
ARM = "one-launch"  # the arm's setup label


def swaps(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """Per unit whose deployed spec is a fused path's and whose one-launch path was found
    too: the kernel, its unit, the fused path and both specs."""
    out = []
    for o in outcomes:
        if o.status != "DONE":
            continue
        for row in o.figures.get("kernels") or []:
            alts = row.get("alternatives") or {}
            won = next((k for k, a in alts.items() if a.get("spec") == row.get("spec")), None)
            if row.get("matched") and won in FUSED and "one-launch" in alts \
                    and row["spec"] in o.native_specs:
                out.append({"kernel": row.get("kernel"), "unit": row.get("unit"), "path": won,
                            "fused": row["spec"], "one_launch": alts["one-launch"]["spec"],
                            "replay": {"fused": alts[won].get("speedup"),
                                       "one_launch": alts["one-launch"].get("speedup")}})
    return out


def with_one_launch(outcomes: list[Outcome], swapped: list[dict[str, Any]]) -> list[Outcome]:
    """The outcomes with each swapped unit's one-launch spec in place of its fused one."""
    by = {s["fused"]: s["one_launch"] for s in swapped}
    return [replace(o, native_specs=tuple(by.get(p, p) for p in o.native_specs))
            for o in outcomes]


def counts_text(x: dict[str, Any]) -> str:
    """A dataset's interposer counts of a fused integration's last run, in words; "" when its
    integration holds no fused entry."""
    if not x.get("fused"):
        return ""
    if x.get("replaced", 0) is None:
        return "the interposer's log of the last run was missing: fusion not seen"
    off = ("; the interposer had turned fusion off (its message in the run's log under "
           "OUT/logs says why)" if x.get("fusion_off") else "")
    one = x.get("flushed_one_launch") or 0
    return (f"{x.get('fused_groups', 0)} fused launches, {x.get('flushed_unfused', 0)} held "
            f"launches run unfused" + (f" ({one} as the one-launch operator)" if one else "")
            + off)


def _fig(x: dict[str, Any]) -> str:
    return f"{x['speedup']:.3f}x [{x['ci'][0]:.3f}, {x['ci'][1]:.3f}]"


def _overall(per: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The geometric mean of the datasets' ``key`` comparisons, its bootstrap interval and
    the verdict on the per-round geometric means (as the program's own)."""
    sides = [x[key] for x in per]
    g, ci = geomean_ci(sides)
    v = judge(round_geomeans(sides), confidence=max(float(d.get("confidence") or CONFIDENCE) for d in sides))
    return {"geomean": g, "geomean_ci": list(ci), "verdict": v.to_json()}


def summary(per: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(figures, text) of the one-launch arm over the datasets of ``per`` (each with its
    ``one_launch`` and ``against_one_launch`` comparisons)."""
    arm, vs = _overall(per, "one_launch"), _overall(per, "against_one_launch")
    g, ci = arm["geomean"], arm["geomean_ci"]
    text = ("the one-launch arm (each fused kernel's one-launch spec in its place) against "
            "the original: " + ", ".join(f"{x['dataset']} {_fig(x['one_launch'])}" for x in per)
            + f"; geometric mean {g:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] "
            f"({arm['verdict']['verdict']}); the fused integration against the one-launch arm: "
            + ", ".join(f"{x['dataset']} {_fig(x['against_one_launch'])}" for x in per)
            + f"; {vs['verdict']['reason']} (per-round geometric means)")
    if vs["verdict"].get("slower"):
        text += ("; the fused integration is conclusively slower than the one-launch arm: "
                 "the one-launch specs would be the faster deployment (not changed here: M4 "
                 "judges, and deploys when faster, the fused integration)")
    return {"one_launch": arm, "against_one_launch": vs}, text


@dataclass(frozen=True)
class Arm:
    """The one-launch arm of M4: its setup (None: not run) and what it holds, or why not
    (``skipped``)."""

    setup: Setup | None
    info: dict[str, Any]
