"""Runtime-aware vs weighted-random model selection, in a discrete-event simulation.

Three models with latencies fast:medium:slow = 1:4:12 (log-normal jitter), ensemble weights
0.6/0.3/0.1, ``--concurrency`` LLM requests in flight, ``--evaluators`` evaluators taking
candidates from a queue. Both policies see the same random streams. Prints evaluator
utilization, evaluations per hour and the model mix.

Evaluation times come from a synthetic evaluator (``--eval-time`` seconds, log-normal jitter)
unless ``--evaluate module:function`` names a real one: it is called once per evaluation with
the candidate's index, and its measured wall time is the evaluation's duration in the
simulation (for example a replay of a recorded kernel).

    python benchmarks/bench_scheduler.py [--hours 4] [--fast 10] [--eval-time 20]

The same comparison in real evolution runs (the controller, the LLM proposer against the
loopback server, real replay evaluations on the CPU backend, wall-clock time):
``benchmarks/bench_scheduler_replay.py``.
"""

from __future__ import annotations

import argparse
import heapq
import importlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kernforge.llm.scheduler import Load, Scheduler

WEIGHTS = {"fast": 0.6, "medium": 0.3, "slow": 0.1}
RATIOS = {"fast": 1.0, "medium": 4.0, "slow": 12.0}


@dataclass
class Sim:
    sched: Scheduler
    evaluators: int
    concurrency: int
    latency: dict[str, float]
    eval_time: Callable[[int], float]
    rng: random.Random
    now: float = 0.0
    events: list[tuple[float, int, str, object]] = field(default_factory=list)
    queue: int = 0
    busy_until: list[float] = field(default_factory=list)
    busy_time: float = 0.0
    done: int = 0
    eval_estimate: float = 0.0
    mix: Counter[str] = field(default_factory=Counter)
    seq: int = 0

    def push(self, t: float, kind: str, data: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, data))

    def request(self) -> None:
        load = Load(evaluators=self.evaluators, queued=self.queue,
                    eval_time_s=self.eval_estimate,
                    busy_until=tuple(b - self.now for b in self.busy_until))
        d = self.sched.choose(load)
        self.mix[d.model] += 1
        lat = self.latency[d.model] * self.rng.lognormvariate(0, 0.3)
        self.push(self.now + lat, "reply", (d.ticket, lat))

    def dispatch(self) -> None:
        while self.queue and len(self.busy_until) < self.evaluators:
            self.queue -= 1
            dur = self.eval_time(self.done + len(self.busy_until))
            self.eval_estimate = dur if not self.eval_estimate else (
                0.7 * self.eval_estimate + 0.3 * dur)
            self.busy_until.append(self.now + dur)
            self.busy_time += dur
            self.push(self.now + dur, "eval", None)

    def run(self, horizon: float) -> None:
        for _ in range(self.concurrency):
            self.request()
        while self.events and self.events[0][0] <= horizon:
            self.now, _, kind, data = heapq.heappop(self.events)
            if kind == "reply":
                ticket, lat = data  # type: ignore[misc]
                self.sched.end(ticket, lat)
                self.queue += 1
                self.request()
            else:
                self.busy_until.remove(min(self.busy_until))
                self.done += 1
            self.dispatch()
        # evaluations still running at the horizon count only up to it
        self.busy_time -= sum(max(0.0, b - horizon) for b in self.busy_until)


def make_eval(args: argparse.Namespace, rng: random.Random) -> tuple[Callable[[int], float], str]:
    if args.evaluate:
        module, _, attr = args.evaluate.partition(":")
        fn = getattr(importlib.import_module(module), attr)

        def real(i: int) -> float:
            t0 = time.perf_counter()
            fn(i)
            return time.perf_counter() - t0
        return real, f"evaluator: {args.evaluate} (measured wall time per evaluation)"
    return (lambda _i: args.eval_time * rng.lognormvariate(0, 0.2),
            (f"evaluator: SYNTHETIC ({args.eval_time:g} s, log-normal jitter 0.2); pass "
            "--evaluate module:function for real replay evaluations"))


def simulate(args: argparse.Namespace, runtime_aware: bool) -> tuple[Sim, str]:
    latency = {m: r * args.fast for m, r in RATIOS.items()}
    rng = random.Random(args.seed)
    eval_fn, note = make_eval(args, random.Random(args.seed + 1))
    sim = Sim(sched=Scheduler(WEIGHTS, latency_s=latency, seed=args.seed,
                              runtime_aware=runtime_aware, clock=lambda: sim.now),
              evaluators=args.evaluators, concurrency=args.concurrency, latency=latency,
              eval_time=eval_fn, rng=rng)
    sim.run(args.hours * 3600)
    return sim, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=4.0, help="simulated time")
    ap.add_argument("--fast", type=float, default=10.0, help="fast model latency (s)")
    ap.add_argument("--eval-time", type=float, default=20.0, help="synthetic evaluation (s)")
    ap.add_argument("--evaluators", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4, help="LLM requests in flight")
    ap.add_argument("--evaluate", help="module:function run for every evaluation")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"latencies fast:medium:slow = 1:4:12 ({args.fast:g}/{4 * args.fast:g}/"
          f"{12 * args.fast:g} s), weights 0.6/0.3/0.1, {args.evaluators} evaluators, "
          f"{args.concurrency} requests in flight, {args.hours:g} simulated hours")
    rows = []
    for name, aware in (("weighted-random", False), ("runtime-aware", True)):
        sim, note = simulate(args, aware)
        util = sim.busy_time / (args.evaluators * args.hours * 3600)
        total = sum(sim.mix.values()) or 1
        mix = "/".join(f"{sim.mix[m] / total:.2f}" for m in WEIGHTS)
        rows.append((name, util, sim.done / args.hours, mix, sim.sched.backfills))
    print(note)
    print(f"{'policy':18}{'utilization':>12}{'evals/hour':>12}{'mix f/m/s':>16}{'backfills':>11}")
    for name, util, eph, mix, bf in rows:
        print(f"{name:18}{util:12.1%}{eph:12.1f}{mix:>16}{bf:11d}")


if __name__ == "__main__":
    main()
