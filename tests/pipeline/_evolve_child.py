"""Run the evolve pipeline in a subprocess (killed with SIGKILL by the resume tests).

Arguments: recordings, run directory, memo directory (``-``: real evaluations, no memo),
LLM base URL, iterations, seconds of delay before each evaluation."""

import sys
import time
from pathlib import Path

from kernforge.pipeline.evolve import evolve_kernel
from kernforge.pipeline.evolve_eval import make_evolve_evaluator
from kernforge.record import find_recordings, load_recording
from tests.pipeline.evolve_helpers import llm_config, memoized

if __name__ == "__main__":
    rec_dir, run_dir, memo, base_url, iters, delay = sys.argv[1:7]
    recs = [load_recording(p) for p in find_recordings(rec_dir)]
    cfg = llm_config(base_url, int(iters))
    real = make_evolve_evaluator(recs, inner_trials=2, repeat=3)
    inner = real if memo == "-" else memoized(real, memo)

    def slow(code: str):  # keeps an evaluation in flight long enough to be killed in it
        time.sleep(float(delay))
        return inner(code)

    evolve_kernel(recs, cfg, Path(run_dir), resume=True, evaluate=slow, validate_winner=False)
