"""``kernforge demo``: record an example application, replay, verify, tune, evolve, deploy and
measure the end-to-end speedup; catch a wrong variant."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import Status
from ..core.fmt import fmt_time
from ..deploy.gate import NOISE_BAND
from ..harness import ABResult
from ..harness.verdict import ci_label
from ..pipeline.demo import DemoResult, run_demo
from ..pipeline.demo_checks import MIN_N, MIN_STEPS, WHY_MIN_N, WHY_MIN_STEPS, check_out
from ..pipeline.demo_deploy import ROUNDS
from ..pipeline.demo_fuse import describe
from ..pipeline.evolve_final import measurement_text
from .checks import NON_NEGATIVE, POSITIVE, float_range, int_range, writable_dir
from .output import console, fmt_error
from .progress import line_progress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job end to end on an example application",
                       description="Record examples/heat3d_cupy.py (with a GPU) or "
                                   "examples/heat3d_cpu.py, replay and verify every recorded "
                                   "kernel, tune the hottest one, evolve its source (offline "
                                   "rewrites, or an LLM when KERNFORGE_LLM_BASE_URL is set), "
                                   "measure what a replaced launch costs the host, export the "
                                   "verified winners worth it (docs/deploy.md) as a deployment "
                                   "spec, run the application with it and print the end-to-end "
                                   "speedup (or that nothing was deployed); show "
                                   "that a variant which changes the arithmetic is caught. "
                                   "On the CUDA example, then try to fuse several steps of "
                                   "its time loop into one launch and deploy that through the "
                                   "driver interposer when it is verified and faster end to "
                                   "end.")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory, absent or empty (default: a new runs/demo-DATE-TIME)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when a GPU is usable, else cpu")
    p.add_argument("--n", type=_at_least(MIN_N, WHY_MIN_N), default=None,
                   help=f"grid points per axis, at least {MIN_N} (default 256 for the CUDA "
                        f"example, 128 for the CPU one)")
    p.add_argument("--steps", type=_at_least(MIN_STEPS, WHY_MIN_STEPS), default=20,
                   help=f"time steps, at least {MIN_STEPS} (default 20)")
    p.add_argument("--trials", type=POSITIVE, default=12, help="tuning trials (default 12)")
    p.add_argument("--repeat", type=POSITIVE, default=7, help="timed runs per replay (default 7)")
    p.add_argument("--iterations", type=POSITIVE, default=12,
                   help="evolution iterations (default 12)")
    p.add_argument("--inner-trials", type=POSITIVE, default=None,
                   help="tuning trials per evolved candidate (default 4 on the CPU example, "
                        "10 on the CUDA one)")
    p.add_argument("--e2e-steps", type=POSITIVE, default=None, metavar="N",
                   help="time steps of the end-to-end runs (default: 500 for the CUDA "
                        "example, --steps for the CPU one)")
    p.add_argument("--confirm-rounds", type=NON_NEGATIVE, default=ROUNDS, metavar="N",
                   help="interleaved rounds of the application with each winner alone, to "
                        f"keep only those it is faster with (default {ROUNDS}, the fewest a "
                        "verdict can be drawn from; 0 = skip)")
    p.add_argument("--rounds", type=POSITIVE, default=ROUNDS,
                   help=f"interleaved end-to-end rounds, plain vs with the spec (default "
                        f"{ROUNDS}, the fewest a verdict can be drawn from)")
    p.add_argument("--fuse-steps", type=_fuse_steps, default=None, metavar="T,T,...",
                   help="CUDA example: the steps per fused launch tried (odd, 3 to 63; "
                        "default 3,5,7); 0 skips the fusion stage")
    p.add_argument("--diag-every", type=NON_NEGATIVE, default=None, metavar="K",
                   help="passed to the example: its per-step diagnostic reduction every K "
                        "steps, 0 = never (default: the example's own: 1 on the CUDA example, "
                        "5 on the CPU one); a step with a reduction is not fused")
    p.add_argument("--llm-url", default=None, metavar="URL",
                   help="an OpenAI-compatible endpoint for the LLM proposer "
                        "(default $KERNFORGE_LLM_BASE_URL; none: offline rewrites only)")
    p.add_argument("--llm-model", default=None,
                   help="model name at --llm-url (default $KERNFORGE_LLM_MODEL or 'default')")
    p.add_argument("--evolve-config", type=Path, default=None, metavar="FILE",
                   help="a kernforge evolve config (YAML/TOML) instead of the demo's own")
    p.add_argument("--wait-idle", type=float_range(0.0), default=0.0, metavar="S",
                   help="first wait up to S seconds for an idle machine (the wins it measures "
                        "while busy are not deployed); default 0: start at once")
    p.add_argument("--in-process", action="store_true",
                   help="run candidate code in this process (for debugging: a crashing "
                        "candidate then ends the demo)")
    p.set_defaults(func=run)


def _fuse_steps(text: str) -> tuple[int, ...]:
    """An argparse ``type``: ``0`` (no fusion) or odd steps per fused launch, 3 to 63."""
    from ..apps.fused import MAX_STEPS, MIN_STEPS

    try:
        steps = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         f"integers") from None
    if steps == (0,):
        return ()
    bad = [t for t in steps if t % 2 == 0 or not MIN_STEPS <= t <= MAX_STEPS]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0]} is not an odd number from {MIN_STEPS} to "
                                         f"{MAX_STEPS} (the last of T swapped steps must "
                                         f"write the buffer the fused launch writes)")
    return steps


def _at_least(lo: int, why: str) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``lo``, the message saying why."""
    check = int_range(lo)

    def parse(text: str) -> int:
        try:
            return check(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({why})") from None

    parse.__name__ = "int"
    return parse


def run(args: argparse.Namespace) -> int:
    writable_dir(args.out, "--out")
    check_out(args.out)  # before any wait or work: an earlier run's directory is refused
    if args.backend == "cuda":  # before the application runs: exit 3, not a traceback later
        from ..backends.cuda import require_cupy

        require_cupy("kernforge demo --backend cuda",
                     "install cupy-cuda13x on a machine with a GPU, or leave --backend out "
                     "(the CPU backend is used when no GPU is present)")
    if args.wait_idle > 0:
        wait_for_idle(args.backend or "cpu", args.wait_idle)
    with console.status("starting") as status, line_progress(console) as lines:
        def progress(msg: str) -> None:
            status.update(escape(msg))
            # off a terminal: a line per step ("tuning X (12 trials ...)"), the frequent
            # "step: detail" updates only in the periodic lines
            (lines.update if ": " in msg else lines.step)(msg)

        result = run_demo(args.out, backend=args.backend, n=args.n, steps=args.steps,
                          trials=args.trials, repeat=args.repeat, iterations=args.iterations,
                          inner_trials=args.inner_trials, rounds=args.rounds,
                          e2e_steps=args.e2e_steps, confirm_rounds=args.confirm_rounds,
                          fuse_steps=args.fuse_steps, diag_every=args.diag_every,
                          llm_url=args.llm_url, llm_model=args.llm_model,
                          evolve_config=args.evolve_config, progress=progress,
                          isolate=not args.in_process)
    t = Table(title=f"1. every recorded kernel of {result.app.script}, replayed and verified "
                    f"({result.app.backend} backend)")
    for col in ("unit", "status", "median", "min", "max", "max error"):
        t.add_column(col)
    for rec, m in result.baseline:
        t.add_row(rec.name, m.status.value, fmt_time(m.median), fmt_time(m.min),
                  fmt_time(m.max), escape(fmt_error(m)))
    console.print(t)
    tuned = result.tuned
    if tuned is not None:
        best = tuned.study.best_trial
        base = tuned.study.baseline
        changed = {k: v for k, v in (best.config.items() if best else ())
                   if base is None or base.config.get(k) != v}
        hits = sum(1 for t in tuned.study.trials if t.cached)
        console.print(f"2. tuned {tuned.recording.name}: {tuned.study.evaluations} "
                      f"evaluations, each compiled, verified and timed ({hits} cache hits "
                      f"not counted{_early(tuned.study.stop_reason)}); "
                      f"{speedup_text(tuned.ab, tuned.speedup)}", markup=False)
        console.print("   best: " + (", ".join(f"{k}={v}" for k, v in changed.items())
                                      or "the recorded configuration"), markup=False)
        console.print(f"   history: {tuned.directory / 'history.png'}", markup=False)
    wrong = result.wrong
    assert wrong is not None
    console.print(f"3. a variant of {result.wrong_unit} that changes the arithmetic "
                  f"({result.app.wrong_label}): {wrong.status.value}", markup=False)
    for c in wrong.failed_checks:
        console.print(f"   buffer {c.describe()}", markup=False)
    _print_evolve_and_deploy(result)
    if result.fusion is not None:
        console.print(f"7. {describe(result.fusion)}", markup=False, soft_wrap=True)
    console.print(f"\nrun directory: {result.run_dir} (summary.json)", markup=False)
    why = []
    if not all(m.ok for _, m in result.baseline):
        why.append("a recorded kernel did not replay")
    if wrong.status is not Status.WRONG_RESULT:
        why.append("the wrong variant was not caught")
    if result.e2e is not None and not result.e2e.identical:
        why.append("the application's outputs differ with the spec")
    if result.e2e is not None and result.e2e.substituted < 1:
        why.append("the deployment replaced no launch (the spec matched none of the "
                   "application's launches), so there is no end-to-end speedup")
    if why:
        console.print(f"[bold red]demo failed:[/] {escape('; '.join(why))}")
    return 1 if why else 0


def wait_for_idle(backend: str, limit_s: float, poll_s: float = 2.0) -> bool:
    """Poll the idle check (harness/provenance.py) until the device is idle or ``limit_s``
    passed; say which. True when idle (or the check cannot run here)."""
    from ..backends import get_backend
    from ..harness.provenance import idle_check

    be = get_backend(backend)
    t0 = time.monotonic()
    while True:
        check = idle_check(be)
        waited = time.monotonic() - t0
        if check.idle is not False:
            console.print(f"waited {waited:.0f} s for an idle machine: "
                          f"{'idle' if check.idle else 'cannot tell (' + check.note + ')'}",
                          markup=False)
            return True
        if waited >= limit_s:
            console.print(f"waited {waited:.0f} s for an idle machine: still "
                          f"{check.utilisation or 1.0:.0%} busy; starting anyway (results "
                          f"measured while busy are not deployed)", markup=False)
            return False
        time.sleep(poll_s)


def speedup_text(ab: ABResult | None, speedup: float) -> str:
    """The one way a speedup is printed: the interleaved median ratio, its interval, and the
    medians of the same measurement."""
    if ab is None:
        return f"no interleaved measurement (the recorded configuration stayed best: {speedup:.3f}x)"
    return (f"interleaved speedup {ab.speedup:.3f}x [{ci_label(ab.confidence)} "
            f"{ab.ci_low:.3f}, {ab.ci_high:.3f}]"
            f" (median of {ab.passes} per-pass ratios; medians {fmt_time(ab.median_a)} "
            f"recorded, {fmt_time(ab.median_b)} tuned)")


# why a tuning run evaluated fewer configurations than its trials (docs/tuning.md)
_STOPPED = {"stalled": "the sampler proposed only configurations already measured",
            "exhausted": "every configuration of the space was measured",
            "patience": "no better one in its patience's worth of evaluations",
            "seconds": "its time budget ran out"}


def _early(stop_reason: str) -> str:
    why = _STOPPED.get(stop_reason)
    return f"; stopped before its trials: {why}" if why else ""


def _print_evolve_and_deploy(result: DemoResult) -> None:
    if result.evolved:
        console.print(f"4. evolved {len(result.evolved)} kernel(s), every candidate verified "
                      f"on every recording and tuned:", markup=False)
    for ev in result.evolved:
        r, f = ev.report, ev.final
        best = f.best.id if f.best else "-"
        console.print(f"   {ev.kernel}: {r.programs} programs, {r.evaluations} evaluations "
                      f"({r.evaluations_failed} rejected); best {best} "
                      f"{measurement_text(f)}", markup=False)
        console.print(f"   report: {r.files.get('report')}", markup=False)
    if not result.winners:
        console.print(f"5. no win to deploy (a win is verified, measured on an idle device, "
                      f"and its interval's lower end is above 1 + the {NOISE_BAND:.0%} noise "
                      f"band)", markup=False)
        for n in result.not_deployed:
            console.print(f"   not deployed: {n.reason}", markup=False)
        return
    _print_overhead(result)
    e = result.e2e
    if e is None and result.confirming:
        console.print("6. nothing deployed: the application was not faster with any winner "
                      "alone (step 5); end to end: nothing deployed", markup=False)
        return
    if e is None:
        console.print("6. nothing deployed: no verified winner saves more per launch than a "
                      "replaced launch costs the host here; end to end: nothing deployed (the "
                      "application was not run again)", markup=False)
        return
    verdict = "outputs identical" if e.identical else "OUTPUTS DIFFER"
    if e.substituted < 1:
        console.print(f"6. deployed {e.spec}, but no launch of the application was replaced: "
                      f"no end-to-end speedup to report ({verdict})", markup=False)
        return
    won = ", ".join(f"{w.recording.source.entry} ({w.source}, {w.ab.speedup:.3f}x)"
                    for w in e.winners)
    length = f" ({result.e2e_steps} steps)" if result.e2e_steps else ""
    console.print(f"6. deployed {won} ({e.spec}): end to end, the application{length} "
                  f"is {e.judgement.reason} (median of "
                  f"{len(e.ratios)} interleaved per-round ratios; {e.direction}; medians "
                  f"{fmt_time(e.plain_median_s)} plain, {fmt_time(e.deployed_median_s)} with "
                  f"the spec), {e.substituted} launches replaced, {verdict}", markup=False)


def _print_overhead(result: DemoResult) -> None:
    """Step 5: what a replaced launch costs the host, each winner alone in the application,
    and the winners left out."""
    table = result.overhead
    if table is None:
        console.print(f"5. the host time of a replaced launch could not be measured "
                      f"({result.overhead_error}): every verified winner is a candidate",
                      markup=False)
    else:
        console.print(f"5. a replaced launch costs the host {table.per_launch_s * 1e6:+.2f} us "
                      f"beyond a plain one here ({table.backend} backend, median of "
                      f"{table.batches} batches of {table.launches} launches; a plain launch "
                      f"{table.issue_s * 1e6:.2f} us); a winner must save more than that per "
                      f"launch, or run longer than both together", markup=False)
    for c in result.confirmed:
        console.print(f"   {c.winner.recording.source.entry} alone in the application "
                      f"({len(c.e2e.ratios)} interleaved rounds, {c.e2e.substituted} launches "
                      f"replaced): {c.e2e.judgement.reason}: "
                      f"{'kept' if c.kept else 'left out'}", markup=False, soft_wrap=True)
    for n in result.not_deployed:
        console.print(f"   not deployed: {n.reason}", markup=False)
