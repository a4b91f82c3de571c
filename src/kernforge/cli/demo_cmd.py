"""``kernforge demo``: record an example application, replay, verify, tune, evolve, deploy and
measure the end-to-end speedup; catch a wrong variant."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import Status
from ..core.fmt import fmt_time
from ..pipeline.demo import DemoResult, run_demo
from .output import console, fmt_error


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
                                   "that a variant which changes the arithmetic is caught.")
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/demo-*)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when a GPU is usable, else cpu")
    p.add_argument("--n", type=int, default=None, help="grid points per axis")
    p.add_argument("--steps", type=int, default=20, help="time steps (default 20)")
    p.add_argument("--trials", type=int, default=12, help="tuning trials (default 12)")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per replay (default 7)")
    p.add_argument("--iterations", type=int, default=12,
                   help="evolution iterations (default 12)")
    p.add_argument("--inner-trials", type=int, default=None,
                   help="tuning trials per evolved candidate (default 4 on the CPU example, "
                        "10 on the CUDA one)")
    p.add_argument("--e2e-steps", type=int, default=None, metavar="N",
                   help="time steps of the end-to-end runs (default: 500 for the CUDA "
                        "example, --steps for the CPU one)")
    p.add_argument("--confirm-rounds", type=int, default=7, metavar="N",
                   help="interleaved rounds of the application with each winner alone, to "
                        "keep only those it is faster with (default 7; 0 = skip)")
    p.add_argument("--rounds", type=int, default=7,
                   help="interleaved end-to-end rounds, plain vs with the spec (default 7)")
    p.add_argument("--llm-url", default=None, metavar="URL",
                   help="an OpenAI-compatible endpoint for the LLM proposer "
                        "(default $KERNFORGE_LLM_BASE_URL; none: offline rewrites only)")
    p.add_argument("--llm-model", default=None,
                   help="model name at --llm-url (default $KERNFORGE_LLM_MODEL or 'default')")
    p.add_argument("--evolve-config", type=Path, default=None, metavar="FILE",
                   help="a kernforge evolve config (YAML/TOML) instead of the demo's own")
    p.add_argument("--in-process", action="store_true",
                   help="run candidate code in this process (for debugging: a crashing "
                        "candidate then ends the demo)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with console.status("starting") as status:
        result = run_demo(args.out, backend=args.backend, n=args.n, steps=args.steps,
                          trials=args.trials, repeat=args.repeat, iterations=args.iterations,
                          inner_trials=args.inner_trials, rounds=args.rounds,
                          e2e_steps=args.e2e_steps, confirm_rounds=args.confirm_rounds,
                          llm_url=args.llm_url, llm_model=args.llm_model,
                          evolve_config=args.evolve_config, progress=lambda s: status.update(escape(s)),
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
        ci = f" (95% CI {tuned.ab.ci_low:.3f}-{tuned.ab.ci_high:.3f})" if tuned.ab else ""
        console.print(f"2. tuned {tuned.recording.name}: {tuned.study.evaluations} verified "
                      f"trials, recorded {fmt_time(tuned.baseline_s)} -> best "
                      f"{fmt_time(tuned.best_s)}; interleaved speedup {tuned.speedup:.3f}x{ci}",
                      markup=False)
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


def _print_evolve_and_deploy(result: DemoResult) -> None:
    for ev in result.evolved:
        r, f = ev.report, ev.final
        best = f.best.id if f.best else "-"
        console.print(f"4. evolved {ev.kernel}: {r.programs} programs, {r.evaluations} "
                      f"evaluations ({r.evaluations_failed} rejected); best {best} "
                      f"{f.status}, interleaved speedup {f.speedup:.3f}x",
                      markup=False)
        console.print(f"   report: {r.files.get('report')}", markup=False)
    if not result.winners:
        console.print("5. no verified speedup above 1 to deploy", markup=False)
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
    won = ", ".join(f"{w.recording.source.entry} ({w.source}, {w.ab.speedup:.2f}x)"
                    for w in e.winners)
    length = f" ({result.e2e_steps} steps)" if result.e2e_steps else ""
    console.print(f"6. deployed {won} ({e.spec}): application{length} "
                  f"{fmt_time(min(e.plain_s))} plain -> {fmt_time(min(e.deployed_s))} with the "
                  f"spec; end-to-end speedup {e.speedup:.3f}x (median of {len(e.ratios)} "
                  f"interleaved rounds; {e.direction}), {e.substituted} launches replaced, "
                  f"{verdict}",
                  markup=False)


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
        console.print(f"   {c.winner.recording.source.entry} alone in the application: "
                      f"{c.e2e.speedup:.3f}x (median of {len(c.e2e.ratios)} interleaved rounds, "
                      f"{c.e2e.substituted} launches replaced): "
                      f"{'kept' if c.kept else 'left out'}", markup=False)
    for n in result.not_deployed:
        console.print(f"   not deployed: {n.reason}", markup=False)
