"""Runtime-aware vs weighted-random model selection in real evolution runs on the CPU backend.

The CPU heat example (``examples/heat3d_cpu.py``) is recorded once into a temporary directory
(kernel ``heat_step``, two launches). Each mode then runs the evolution controller
(``kernforge.evolve.controller.run``) for ``--seconds`` of wall time, in a process of its own
with empty compile caches:

- proposer: ``LLMProposer`` over three models served by the loopback ``FakeLLMServer`` with
  latencies fast:medium:slow = 1:4:12 (``--fast`` seconds, 4x, 12x), ensemble weights
  0.6/0.3/0.1, ``--concurrency`` requests in flight (``llm_slots``); the modes differ only in
  ``runtime_aware``;
- evaluator: the pipeline's (``pipeline.evolve_eval.make_evolve_evaluator``), ``--evaluators``
  at once: every candidate compiled, verified on every recording, tuned (``--inner-trials`` TPE
  trials) and timed by ``kernforge.replay``; nothing is cached between candidates or modes.

The scripted server answers request k with candidate k of one fixed list (shuffled with
``--seed``) of full rewrites of ``heat_step`` -- tile size, an unrolling pragma, an OpenMP
schedule; all bitwise-correct -- so both modes see the same candidates in the same order, the
same seeds and recordings. Rounds alternate which mode runs first (the machine drifts).

Per mode: evaluator utilization (evaluator-busy seconds / (evaluators x seconds), counted from
the end of the seed program's evaluation), evaluations finished per hour, LLM calls per model,
backfill decisions.

    python benchmarks/bench_scheduler_replay.py [--seconds 60] [--rounds 2] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "heat3d_cpu.py"
WEIGHTS = {"fast": 0.6, "medium": 0.3, "slow": 0.1}
RATIOS = {"fast": 1.0, "medium": 4.0, "slow": 12.0}
MODES = {"weighted-random": False, "runtime-aware": True}
LOOP = "for (int i = 1; i < nx - 1; i++) {"
OMP = "#pragma omp parallel for collapse(2)"


def candidates(code: str, seed: int) -> list[str]:
    """Bitwise-correct full rewrites of heat_step (the seed's own settings left out)."""
    if "#define TILE_J 16" not in code or LOOP not in code or OMP not in code:
        raise SystemExit("examples/heat3d_cpu.py changed: update candidates()")
    line = next(ln for ln in code.splitlines() if LOOP in ln)
    indent = line[: len(line) - len(line.lstrip())]
    out = []
    for tile, unroll, sched in itertools.product(
            (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64), (0, 2, 4, 8),
            ("", " schedule(static)", " schedule(dynamic)", " schedule(guided)")):
        c = code.replace("#define TILE_J 16", f"#define TILE_J {tile}").replace(OMP, OMP + sched)
        if unroll:
            c = c.replace(line, f"{indent}#pragma GCC unroll {unroll}\n{line}")
        if c != code:
            out.append(c)
    random.Random(seed).shuffle(out)
    return out


def _llm_config(base_url: str, latency: dict[str, float]) -> Any:
    from kernforge.llm.config import LLMConfig

    # timeout_s / 10 is the scheduler's first latency estimate: the true latency here
    return LLMConfig.from_mapping({
        "base_url": base_url, "api_key_env": "KF_BENCH_NO_KEY", "max_retries": 0,
        "models": [{"name": m, "weight": WEIGHTS[m], "timeout_s": 10 * latency[m]}
                   for m in WEIGHTS]})


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One mode, one run of the real controller; the measurements as a dict."""
    from kernforge.evolve.config import EvolveConfig
    from kernforge.evolve.controller import run
    from kernforge.evolve.prompts import PromptStatic
    from kernforge.evolve.proposers import make_proposer
    from kernforge.evolve.store import Store
    from kernforge.llm.fake_server import FakeLLMServer
    from kernforge.pipeline.evolve import default_contract
    from kernforge.pipeline.evolve_eval import EvolveTarget, make_evolve_evaluator
    from kernforge.record import find_recordings, load_recording

    target = EvolveTarget.of([load_recording(p) for p in find_recordings(args.rec)])
    evaluate = make_evolve_evaluator(target, inner_trials=args.inner_trials, repeat=args.repeat)
    spans: list[tuple[float, float, str]] = []
    lock = threading.Lock()

    def timed(code: str) -> Any:
        t0 = time.monotonic()
        r = evaluate(code)
        with lock:
            spans.append((t0, time.monotonic(), r.status.value))
        return r

    pool = candidates(target.original_code, args.seed)
    served = itertools.count()

    def reply(body: dict[str, Any]) -> str:  # called under the server's lock
        k = next(served)
        code = pool[k % len(pool)]
        if k >= len(pool):  # the list is used up: keep candidates distinct
            code += f"\n#define KF_CANDIDATE {k}\n"
        return f"```c\n{code}\n```\n"

    latency = {m: r * args.fast for m, r in RATIOS.items()}
    db = Path(args.json).with_suffix(".db")
    load0 = os.getloadavg()[0]
    with FakeLLMServer(reply, latency=latency) as srv:
        static = PromptStatic(language="c", reference=target.original_code,
                              hardware=platform.processor() or "CPU")
        proposer = make_proposer("llm", config=_llm_config(srv.base_url, latency),
                                 static=static, retries=0, seed=args.seed,
                                 runtime_aware=MODES[args.worker])
        cfg = EvolveConfig(seed=args.seed, max_iterations=100_000, max_seconds=args.seconds,
                           eval_slots=args.evaluators, llm_slots=args.concurrency,
                           max_in_flight=args.window,
                           contract=default_contract(target.primary))
        run(cfg, proposer, timed, db, initial_code=target.original_code, resume=False)
    with Store(db) as store:
        calls = store.llm_calls()
    start, horizon = spans[0][1], spans[0][1] + args.seconds  # spans[0]: the seed
    work = spans[1:]
    busy = sum(max(0.0, min(e, horizon) - max(s, start)) for s, e, _ in work)
    done = [w for w in work if w[1] <= horizon]
    return {"mode": args.worker, "seconds": args.seconds, "evaluators": args.evaluators,
            "busy_s": busy, "evaluations": len(done),
            "statuses": dict(Counter(st for _, _, st in done)),
            "mean_eval_s": sum(e - s for s, e, _ in work) / max(1, len(work)),
            "calls": dict(Counter(c["model"] for c in calls)),
            "backfills": sum(int(c["backfill"]) for c in calls),
            "errors": sum(c["error"] is not None for c in calls),
            "load": (load0 + os.getloadavg()[0]) / 2}


def _row(r: dict[str, Any]) -> dict[str, Any]:
    util = r["busy_s"] / (r["evaluators"] * r["seconds"])
    return {**r, "utilization": util, "per_hour": r["evaluations"] * 3600 / r["seconds"]}


def _total(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    mine = [r for r in rows if r["mode"] == mode]
    calls: Counter[str] = Counter()
    for r in mine:
        calls.update(r["calls"])
    return _row({"mode": mode, "round": "all", "evaluators": mine[0]["evaluators"],
                 "seconds": sum(r["seconds"] for r in mine),
                 "busy_s": sum(r["busy_s"] for r in mine),
                 "evaluations": sum(r["evaluations"] for r in mine), "calls": dict(calls),
                 "backfills": sum(r["backfills"] for r in mine),
                 "mean_eval_s": sum(r["mean_eval_s"] for r in mine) / len(mine),
                 "load": sum(r["load"] for r in mine) / len(mine)})


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| round | mode | evaluator utilization | evaluations/hour | evaluations | "
            "mean evaluation | LLM calls fast/medium/slow | backfills | load average |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['round']} | {r['mode']} | {r['utilization']:.1%} | {r['per_hour']:.0f} | "
             f"{r['evaluations']} | {r['mean_eval_s']:.2f} s | "
             f"{'/'.join(str(r['calls'].get(m, 0)) for m in WEIGHTS)} | {r['backfills']} | "
             f"{r['load']:.1f} |"
             for r in rows]
    return head + "\n".join(lines) + "\n"


def _device() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores visible)"
    except OSError:
        pass
    return f"{platform.processor() or 'CPU'} ({os.cpu_count()} cores visible)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="wall time per mode and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fast", type=float, default=0.5, help="fast model latency (s)")
    ap.add_argument("--evaluators", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4, help="LLM requests in flight")
    ap.add_argument("--window", type=int, default=None,
                    help="the controller's max_in_flight (default evaluators + concurrency)")
    ap.add_argument("--n", type=int, default=64, help="grid of the recorded example")
    ap.add_argument("--threads", type=int, default=1,
                    help="OpenMP threads of the recorded launches (1: one core per evaluator)")
    ap.add_argument("--inner-trials", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the table as markdown here")
    ap.add_argument("--worker", choices=sorted(MODES), help=argparse.SUPPRESS)
    ap.add_argument("--rec", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        Path(args.json).write_text(json.dumps(worker(args)))
        return
    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    settings = (f"latencies fast:medium:slow = 1:4:12 ({args.fast:g}/{4 * args.fast:g}/"
                f"{12 * args.fast:g} s), weights 0.6/0.3/0.1, {args.concurrency} LLM requests "
                f"in flight, {args.evaluators} evaluators, max_in_flight "
                f"{args.window or args.evaluators + args.concurrency}, {args.seconds:g} s per mode "
                f"and round; "
                f"heat_step of examples/heat3d_cpu.py --n {args.n} (2 recordings), inner TPE "
                f"{args.inner_trials} trials, {args.repeat} timed runs")
    print(settings, flush=True)
    rows = run_rounds(args)
    totals = [_total(rows, m) for m in MODES]
    text = table(rows + totals)
    print(text)
    if args.out:
        write_markdown(args.out, command, settings, text, totals)


def run_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    from kernforge.pipeline.run_app import record_application

    rows = []
    with tempfile.TemporaryDirectory(prefix="kf-bench-sched-") as tmp:
        base = Path(tmp)
        os.environ["KERNFORGE_CACHE_DIR"] = str(base / "cache-record")
        rec = base / "rec"
        status, _ = record_application(
            ["python", str(APP), "--n", str(args.n), "--steps", "4", "--diag-every", "0",
             "--threads", str(args.threads)],
            rec, kernels="heat_step", max_instances=2)
        if status != 0:
            raise SystemExit(f"recording {APP.name} failed ({status})")
        for rnd in range(args.rounds):
            order = list(MODES) if rnd % 2 == 0 else list(reversed(MODES))
            for mode in order:
                out = base / f"{rnd}-{mode}.json"
                env = {**os.environ, "KERNFORGE_CACHE_DIR": str(base / f"cache-{rnd}-{mode}")}
                cmd = [sys.executable, __file__, *sys.argv[1:], "--worker", mode,
                       "--rec", str(rec), "--json", str(out)]
                subprocess.run(cmd, env=env, check=True)
                rows.append(_row({**json.loads(out.read_text()), "round": rnd + 1}))
                r = rows[-1]
                print(f"round {rnd + 1} {mode}: utilization {r['utilization']:.1%}, "
                      f"{r['evaluations']} evaluations, calls {r['calls']}, "
                      f"backfills {r['backfills']}, statuses {r['statuses']}", flush=True)
    return rows


def write_markdown(path: Path, command: str, settings: str, text: str,
                   totals: list[dict[str, Any]]) -> None:
    w, a = totals
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Runtime-aware vs weighted-random model selection, real replay evaluations (cpu)\n\n"
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
        f"- device: {_device()}\n"
        f"- command: `{command}`\n"
        f"- settings: {settings}\n\n" + text +
        f"\nRuntime-aware / weighted-random: utilization {a['utilization'] / w['utilization']:.2f}x, "
        f"evaluations per hour {a['per_hour'] / max(w['per_hour'], 1e-9):.2f}x.\n")


if __name__ == "__main__":
    main()
