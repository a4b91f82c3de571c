"""Shared pieces of the evolve pipeline tests: small CPU recordings and scripted LLM replies."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernforge.core import Status
from kernforge.evolve.types import EvalResult, RecordingResult
from kernforge.pipeline.evolve_config import RunConfig, config_from_dict
from kernforge.pipeline.evolve_eval import Evaluate
from kernforge.testing.runs import finished_evaluations

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "heat3d_cpu.py"
APP_ARGS = ["--n", "16", "--steps", "4", "--diag-every", "2"]

_FENCE = re.compile(r"# Current program[^\n]*\n```[a-z]*\n(.*?)\n```", re.DOTALL)
LOOP = "for (int i = 1; i < nx - 1; i++) {"


def _sr(search: str, replace: str) -> str:
    return f"I change one thing.\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def _edits(code: str) -> list[str]:
    """Replies for ``code``: valid small changes first, then broken ones."""
    out = []
    m = re.search(r"#define TILE_J (\d+)", code)
    if m:
        for v in ("2", "4", "8", "12", "24", "32", "48", "64"):
            if v != m.group(1):
                out.append(_sr(m.group(0), f"#define TILE_J {v}"))
    if "#pragma GCC unroll" not in code and LOOP in code:
        line = next(ln for ln in code.splitlines() if LOOP in ln)
        indent = line[: len(line) - len(line.lstrip())]
        out += [_sr(line, f"{indent}#pragma GCC unroll {k}\n{line}") for k in (2, 4, 8)]
    if "schedule(static)" not in code:
        out.append(_sr("#pragma omp parallel for collapse(2)",
                       "#pragma omp parallel for collapse(2) schedule(static)"))
    out.append(_sr("this line is not in the kernel", "nor is this one"))  # unusable reply
    out.append(_sr("alpha * lap;", "alpha * lapx;"))  # does not compile
    out.append(_sr("CENTER_WEIGHT * u[c]", "5.0 * u[c]"))  # wrong results
    return out


def scripted_reply(body: dict[str, Any]) -> str:
    """A deterministic reply from the request: a function of the current program and the set of
    programs shown (not their order), so a resumed run gets the same replies."""
    messages = body.get("messages", [])
    user = messages[1]["content"] if len(messages) > 1 else ""
    m = _FENCE.search(user)
    if m is None:
        return "no program found"
    blocks = sorted(re.findall(r"```[a-z]*\n(.*?)\n```", user, re.DOTALL))
    key = "\0".join([str(body.get("prompt_cache_key", "")), *blocks])
    h = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    edits = _edits(m.group(1))
    return edits[(h + len(messages)) % len(edits)]


def llm_config(base_url: str, iterations: int = 12, seed: int = 3) -> RunConfig:
    return config_from_dict({
        "evolve": {"seed": seed, "max_iterations": iterations, "eval_slots": 1, "llm_slots": 2,
                   "mapelites": {"islands": 3, "migration_interval": 5}},
        "proposers": [{"kind": "llm", "base_url": base_url, "api_key_env": "KF_TEST_NO_KEY",
                       "max_retries": 0, "models": [{"name": "fast", "timeout_s": 30}],
                       "retries": 1}],
        "tuner": {"trials": 2, "repeat": 3},
    }, "test")


def result_to_json(r: EvalResult) -> dict[str, Any]:
    return {"status": r.status.value, "fitness": r.fitness, "error": r.error,
            "config": r.config, "message": r.message, "extra": r.extra,
            "recordings": [{"name": x.name, "status": x.status.value, "median_s": x.median_s,
                            "error": x.error, "message": x.message} for x in r.recordings]}


def result_from_json(d: dict[str, Any]) -> EvalResult:
    recs = tuple(RecordingResult(x["name"], Status(x["status"]), x["median_s"], x["error"],
                                 x["message"]) for x in d["recordings"])
    return EvalResult(status=Status(d["status"]), fitness=d["fitness"], error=d["error"],
                      config=d["config"], recordings=recs, message=d["message"],
                      extra=d["extra"])


def memoized(evaluate: Evaluate, directory: str | Path) -> Evaluate:
    """``evaluate`` with its results kept in ``directory`` (one JSON file per code hash): a
    second run over the same recordings reuses them, so it is reproducible to the bit.

    Test-only: the key is the code alone (not the recordings, backend, device, tolerance,
    preset, trials or repeat), so one ``directory`` must serve one evaluator only."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)

    def run_one(code: str) -> EvalResult:
        path = folder / f"{hashlib.sha256(code.encode()).hexdigest()[:32]}.json"
        if path.is_file():
            return result_from_json(json.loads(path.read_text()))
        r = evaluate(code)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(result_to_json(r), default=str))
        tmp.replace(path)
        return r

    return run_one


def stored_results(db: str | Path) -> dict[str, EvalResult]:
    """Code -> the evaluation a run's store kept for it (every program, the seed included)."""
    from kernforge.evolve.store import Store

    with Store(db) as s:
        its = {row[0]: row[1] for row in s.conn.execute("SELECT id, iteration FROM programs")}
        out = {}
        for p in s.programs():
            r = s.evaluation(its[p.id])
            assert r is not None, f"program {p.id} has no stored evaluation"
            out[p.code] = r
        return out


def replaying(results: dict[str, EvalResult]) -> Evaluate:
    """An evaluator that answers from ``results`` (see :func:`stored_results`); a code it does
    not hold means the run went where the recorded one did not."""
    def run_one(code: str) -> EvalResult:
        assert code in results, "the run evaluated a program the recorded run never did"
        return results[code]

    return run_one


def kill_child_mid_run(heat_recordings: Path, run_dir: Path, memo: str, base_url: str,
                       iterations: int, eval_delay: str, *, after: int = 4) -> None:
    """Run tests.pipeline._evolve_child (memo directory or "-" for real evaluations) and
    SIGKILL it once ``after`` evaluations have finished; the child must still be running."""
    env = {**os.environ,
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.pipeline._evolve_child", str(heat_recordings),
         str(run_dir), memo, base_url, str(iterations), eval_delay], cwd=ROOT, env=env)
    db = run_dir / "evolve.db"
    deadline = time.monotonic() + 120
    while finished_evaluations(db) < after and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.poll() is None, "the child finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
