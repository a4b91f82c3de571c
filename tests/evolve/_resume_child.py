"""Run an evolution in a subprocess (killed with SIGKILL by test_resume)."""

import sys

from kernforge.evolve.config import EvolveConfig
from kernforge.evolve.controller import run
from tests.evolve.evolve_fakes import SEED_CODE, HashEvaluator, OfflineEditProposer

if __name__ == "__main__":
    path, iters, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    cfg = EvolveConfig.from_dict({"seed": 7, "max_iterations": iters, "eval_slots": 2,
                                  "llm_slots": 2, "mapelites": {"migration_interval": 5}})
    run(cfg, OfflineEditProposer(), HashEvaluator(delay), path, initial_code=SEED_CODE)
