"""M4: the integration put together and measured end to end on every dataset.

The integration is what M3's strategies produced: native deployment specs (merged into one,
signed, images copied: ``OUT/m4/deploy.json``), source-level specs (merged likewise:
``OUT/m4/deploy-source.json``), and at most one changed copy of the source (the agent's).
It is applied through the environment only (``LD_PRELOAD`` of the interposer in deploy mode and
``KERNFORGE_DEPLOY``; or ``KERNFORGE_DEPLOY`` naming a source-level spec for a program that
imports kernforge) and the directory the program runs from; the original program is never
changed, and running it without that environment (from its own directory) is the switch.

Every dataset is run in interleaved rounds with and without the integration (the first look
after the rounds an interval at its confidence needs, at least ``e2e_rounds``; more rounds, up
to 3x ``e2e_rounds``, while the verdict is inconclusive: 10, 17, 21 for 7), each run checked by
the program's own check; the speedup per dataset is the median of the per-round ratios, with
its distribution-free interval (99% over the looks) and speed verdict. The program's verdict
(:mod:`kernforge.harness.verdict`) is drawn from the per-round geometric means over the
datasets:

- a dataset conclusively below the floor (default 0.98x: its interval's upper end under it),
  or the program "not faster": nothing is deployed, DROPPED;
- "faster": INTEGRATED (the only state that deploys);
- "inconclusive" (the rounds disagree, or straddle the noise band, or other processes kept
  the machine busy during a dataset's rounds: :meth:`.harness.AppHarness.compare`'s
  ``busy``): INCONCLUSIVE, nothing deployed and nothing called slower (not even below the
  floor, when busy); the reason says what was busy, or to measure again with more rounds.

An integration that deploys a fused path has the one-launch arm (:mod:`.one_launch`) in the
same rounds: the words and figures say how it compares with the original and with the fused
integration, and how many launches the interposer fused; the state is the integration's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core import KernforgeError
from ..core.jsonio import write_json_atomic
from ..deploy import native as nd
from ..deploy.interposed import deploy_env
from ..deploy.merge import merge_native_specs, merge_source_specs
from ..harness.verdict import CONFIDENCE, judge
from . import one_launch as ol
from .harness import AppHarness, RunFailed, Setup, busy_machine, geomean_ci, round_geomeans
from .strategies import Outcome

INTEGRATION = "integration.json"


def integrate(outcomes: list[Outcome], out: Path, original: Path, *, d: Path | None = None,
              label: str = "deployed") -> tuple[Setup, dict[str, Any]]:
    """The setup that runs the program with everything M3 produced, and what it holds
    (``fused``: the kernels of its fused entries); written to ``d`` (default ``OUT/m4``)."""
    native = [s for o in outcomes if o.status == "DONE" for s in o.native_specs]
    source = [s for o in outcomes if o.status == "DONE" for s in o.source_specs]
    copies = [o.source for o in outcomes if o.status == "DONE" and o.source]
    d = d or out / "m4"
    d.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {}
    info: dict[str, Any] = {"native_specs": native, "source_specs": source, "dropped": []}
    if native:
        merged = merge_native_specs([Path(p) for p in native], d / "deploy.json")
        lib, extra = deploy_env(merged.path, d / "deploy.interposer.tsv", d / "deploy-log.json")
        env.update({"LD_PRELOAD": str(lib), **extra})
        info.update(spec=str(merged.path), entries=merged.entries, dropped=merged.dropped,
                    fused=[e["name"] for e in nd.read_spec(merged.path).entries
                           if e.get("fuse") is not None])
    if source:
        merged_src = merge_source_specs([Path(p) for p in source], d / "deploy-source.json")
        if native:  # one KERNFORGE_DEPLOY: the interposer's; say what is left out
            info["dropped"].append(f"source-level spec {merged_src.path}: a native spec is "
                                   "deployed through the same variable; not deployed")
        else:
            env["KERNFORGE_DEPLOY"] = str(merged_src.path.resolve())
            info.update(spec=str(merged_src.path), entries=merged_src.entries)
            info["dropped"].extend(merged_src.dropped)
    root = Path(copies[0]) if copies else None
    info["source"] = str(root) if root else None
    return Setup(label, root or original, env), info


def one_launch_arm(outcomes: list[Outcome], out: Path, original: Path, info: dict[str, Any],
                   enabled: bool = True) -> ol.Arm:
    """M4's one-launch arm (:mod:`.one_launch`) beside the integration ``info`` describes:
    none when it deploys no fused entry; else the setup with each fused kernel's one-launch
    spec in its place (``OUT/m4/one-launch``), or why there is none."""
    if not info.get("fused"):
        return ol.Arm(None, {})
    if not enabled:
        return ol.Arm(None, {"skipped": "[integrate] compare_one_launch = false"})
    swapped = ol.swaps(outcomes)
    if not swapped:
        return ol.Arm(None, {"skipped": "M3a kept no one-launch spec of the fused kernel(s) "
                                        "(none passed its gate, or its rows predate them)"})
    try:
        setup, arm = integrate(ol.with_one_launch(outcomes, swapped), out, original,
                               d=out / "m4" / "one-launch", label=ol.ARM)
    except KernforgeError as exc:
        return ol.Arm(None, {"skipped": f"its specs do not merge ({exc.message})",
                             "swapped": swapped})
    return ol.Arm(setup, {"swapped": swapped, "integration": arm})


def measure(h: AppHarness, setup: Setup, rounds: int, floor: float, *, fused: bool = False,
            arm: ol.Arm | None = None) -> tuple[str, str, dict[str, Any]]:
    """(state, reason, figures) of the end-to-end comparison (see the module docstring).
    ``fused``: the integration holds a fused entry (each dataset's figures and words then
    give the interposer's fusion counts); ``arm``: the one-launch arm, run in the same
    rounds (its figures and words are added; the state is the integration's)."""
    per: list[dict[str, Any]] = []
    figures: dict[str, Any] = {"floor": floor, "rounds": rounds, "datasets": per}
    also = arm.setup if arm is not None else None
    if arm is not None and (arm.setup is not None or arm.info):
        figures["one_launch"] = dict(arm.info)
    for d in h.m.datasets:
        try:
            r = h.compare(d, setup, rounds, also=also) if also else h.compare(d, setup, rounds)
        except RunFailed as exc:
            if also is None or exc.setup.label != ol.ARM:
                return _run_failed(exc, d.name, figures)
            figures["one_launch"]["failed"] = {"dataset": d.name, "why": exc.why}
            also = None  # the arm is dropped; the integration is measured again on d
            try:
                r = h.compare(d, setup, rounds)
            except RunFailed as again:
                return _run_failed(again, d.name, figures)
        x: dict[str, Any] = {"dataset": d.name, **r, **_counts(setup, fused)}
        if also is not None:
            x["one_launch"] = {**x.pop("also"), **_counts(also, False)}
            x["against_one_launch"] = x.pop("against_also")
        per.append(x)
    g, ci = geomean_ci(per)
    busy = max((x["busy"] for x in per if (x.get("busy") or {}).get("idle") is False),
               key=lambda b: b.get("utilisation") or 0.0, default=None)
    # at the confidence of each look the adaptive rounds took (looking again buys nothing)
    overall = judge(round_geomeans(per), confidence=max(
        [float(x.get("confidence") or CONFIDENCE) for x in per]),
        idle=False if busy else None, utilisation=busy.get("utilisation") if busy else None,
        device=busy_machine(busy) if busy else "the device")
    figures.update(geomean=g, geomean_ci=list(ci), verdict=overall.to_json())
    text = ", ".join(f"{x['dataset']} {x['speedup']:.3f}x [{x['ci'][0]:.3f}, {x['ci'][1]:.3f}]"
                     + (f" ({c})" if (c := ol.counts_text(x)) else "") for x in per) + \
        f"; geometric mean {g:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]" + _arm_text(figures, per)
    low = [x["dataset"] for x in per if x["ci"][1] < floor]
    if busy:  # measured the load, not the program: no gate rejects on it either
        return "INCONCLUSIVE", (f"end to end {overall.reason}: nothing is deployed and "
                                f"nothing is called slower ({text})"), figures
    if low:  # conclusively below the floor: the only "slower"
        return "DROPPED", (f"{', '.join(low)} conclusively slower: the interval's upper end "
                           f"is below the {floor:g}x floor: nothing is deployed ({text})"), \
            figures
    if overall.faster:
        return "INTEGRATED", (f"own check passes on every dataset with and without; "
                              f"{overall.reason} (per-round geometric means); {text}"), figures
    if overall.conclusive:
        return "DROPPED", (f"end to end {overall.reason} (per-round geometric means): nothing "
                           f"is deployed ({text})"), figures
    return "INCONCLUSIVE", (f"end to end {overall.reason} (per-round geometric means): "
                            f"nothing is deployed, and no dataset is below the floor; start a "
                            f"new run on an idle machine, or with more rounds ([measure] "
                            f"e2e_rounds) ({text})"), figures


def _arm_text(figures: dict[str, Any], per: list[dict[str, Any]]) -> str:
    """The one-launch arm's words (its figures added to ``figures``), or why there is none;
    "" when the integration deploys no fused entry."""
    arm = figures.get("one_launch")
    if arm is None:
        return ""
    if "failed" in arm:
        f = arm["failed"]
        return (f"; the one-launch arm fails the program's own check on {f['dataset']} "
                f"({f['why']}): it is not compared")
    if "skipped" in arm:
        return f"; no one-launch arm: {arm['skipped']}"
    summary, text = ol.summary(per)
    arm.update(summary)
    return f"; {text}"


def _run_failed(exc: RunFailed, dataset: str, figures: dict[str, Any]
                ) -> tuple[str, str, dict[str, Any]]:
    """M4's end when a run failed its check: BLOCKED when the unmodified program failed,
    else DROPPED (kernforge's changes broke it)."""
    figures["failed"] = {"dataset": dataset, "side": exc.setup.label, "why": exc.why}
    if exc.setup.label == "original":
        return "BLOCKED", f"the unmodified program failed in M4: {exc}", figures
    return "DROPPED", (f"with kernforge's changes the program fails its own check on "
                       f"{dataset}: {exc.why}; nothing is deployed"), figures


def _counts(setup: Setup, fused: bool) -> dict[str, Any]:
    """The interposer's counts of the dataset's last run with the native deployment:
    launches that ran the replacement, and launches of deployed kernels that did not; with a
    fused entry (``fused``: the integration holds one), the fused launches it made
    (``fused_groups``), the held launches it ran unfused (``flushed_unfused``: a copy, a
    sync, the loop's end... came first) and those of them that ran the fused entry's
    one-launch replacement (``flushed_one_launch``)."""
    if "KERNFORGE_DEPLOY_LOG" not in setup.env:
        return {}
    log = nd.read_log(Path(setup.env["KERNFORGE_DEPLOY_LOG"]))
    flag = {"fused": True} if fused else {}
    if not log:
        return {"replaced": None, **flag}
    counts = {"replaced": sum(e.get("replaced", 0) for e in log.get("entries", [])),
              "fallbacks": log.get("fallbacks", 0), **flag}
    if fused or any(e.get("fuse") for e in log.get("entries", [])):
        counts.update(fused_groups=log.get("fused_groups", 0),
                      flushed_unfused=log.get("flushed_unfused", 0),
                      flushed_one_launch=log.get("flushed_one_launch", 0))
        if log.get("fusion") is False:  # turned off in the run (its stderr says why)
            counts["fusion_off"] = True
    return counts


def write_integration(out: Path, setup: Setup, info: dict[str, Any], deployed: bool) -> Path:
    """``OUT/integration.json``: how to run the program with the integration (the
    environment and directory), or that nothing is deployed."""
    return write_json_atomic(out / INTEGRATION, {
        "deployed": deployed, "env": dict(setup.env) if deployed else {},
        "run_from": str(setup.source) if deployed and info.get("source") else None,
        **{k: v for k, v in info.items() if k != "source"}})
