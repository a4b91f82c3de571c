"""Prefix reuse of kernforge's prompts vs OpenEvolve's, over one synthetic 100-iteration run.

For each prompt: the longest common token prefix with any of the previous 16 prompts, as a
share of its length (tokenizer: kernforge.llm.tokens, a regex of words, whitespace runs and
single punctuation characters; prompts rendered as ``<|role|>\\ncontent\\n`` per message).
Both columns see the same population, parents and inspirations, drawn by kernforge's\nMAP-Elites archive (evolve.mapelites.Archive, default configuration, 4 islands). OpenEvolve's PromptSampler is
driven as its parallel controller drives it (``process_parallel._run_iteration_worker``): top
and diverse programs of the parent's island sorted by score, the parent's metrics, the
iteration number, diff-based evolution. Its system message is set to ours (a user would
configure it), so the columns differ only in layout.

    python benchmarks/bench_prompt_prefix.py [--iterations 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
from collections import deque
from typing import Any

from kernforge.core import Status
from kernforge.evolve.features import default_features
from kernforge.evolve.mapelites import Archive, MapElitesConfig
from kernforge.evolve.prompts import PromptBuilder, PromptStatic, system_message
from kernforge.evolve.types import Program, ProposalRequest
from kernforge.llm.fake_server import render_prompt
from kernforge.llm.tokens import NAME as TOKENIZER
from kernforge.llm.tokens import longest_prefix, tokenize

CONTRACT = """entry: extern "C" __global__ void heat_stencil(const double* u, double* un,
    double alpha, int n)
launch: grid (n/8, n/8, n/8), block (8, 8, 8); n = 256
buffers: u read-only (n^3 doubles), un written (n^3 doubles), bitwise verification
the kernel must handle every (i, j, k) in [0, n)^3; faces copy u to un"""
HARDWARE = "NVIDIA H200 (sm_90, 132 SMs, 50 MB L2, 4.8 TB/s HBM3e)"

BASE = r"""extern "C" __global__ void heat_stencil(const double* __restrict__ u,
                                        double* __restrict__ un, double alpha, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= n || j >= n || k >= n) return;
    const long long sy = n, sz = (long long)n * n;
    const long long c = k * sz + j * sy + i;
    if (i == 0 || j == 0 || k == 0 || i == n - 1 || j == n - 1 || k == n - 1) {
        un[c] = u[c];
        return;
    }
    const double lap = u[c - 1] + u[c + 1] + u[c - sy] + u[c + sy] + u[c - sz] + u[c + sz]
                     - 6.0 * u[c];
    un[c] = u[c] + alpha * lap;
}"""

MUTATIONS = [
    ("u[c - 1]", "__ldg(&u[c - 1])"), ("u[c + 1]", "__ldg(&u[c + 1])"),
    ("- 6.0 * u[c]", "- 6.0 * __ldg(&u[c])"), ("un[c] = u[c];", "un[c] = __ldg(&u[c]);"),
    ("const long long c", "const long long c /* linear */"),
    ("{\n    const int i", "{\n    #pragma unroll 2\n    const int i"),
]


def mutate(code: str, rng: random.Random) -> str:
    lines = code.split("\n")
    r = rng.random()
    if r < 0.5:
        a, b = rng.choice(MUTATIONS)
        if a in code:
            return code.replace(a, b, 1)
    if r < 0.8:
        at = rng.randrange(3, len(lines) - 1)
        lines.insert(at, f"    // variant {rng.randrange(10**6)}: tile {rng.choice([2, 4, 8])}")
        return "\n".join(lines)
    at = rng.randrange(3, len(lines) - 1)
    lines.insert(at, f"    const int t{rng.randrange(100)} = threadIdx.x & {rng.choice([7, 15, 31])};")
    return "\n".join(lines)


def new_program(pid: int, code: str, parent: Program | None, island: int,
                rng: random.Random) -> Program:
    ok = rng.random() > 0.2
    fitness = rng.uniform(80e-6, 200e-6) if ok else None
    extra = {"num_regs": rng.choice([24, 32, 40, 48, 64]), "bytes_moved": 2 * 8 * 256**3}
    return Program(id=f"p{pid:04d}", code=code, parent_id=parent.id if parent else None,
                   island=island, generation=(parent.generation + 1) if parent else 0,
                   fitness=fitness, status=Status.OK if ok else Status.WRONG_RESULT,
                   features=default_features(code, fitness, extra), created=float(pid))


def sample(archive: Archive, island: int, rng: random.Random) -> tuple[Program, list[Program]]:
    """Parent and inspirations exactly as kernforge's controller draws them."""
    parent, _ = archive.select_parent(island, rng)
    assert parent is not None
    return parent, list(archive.inspirations(island, rng, parent))


def oe_program(p: Program) -> Any:
    from openevolve.database import Program as OEProgram

    score = 1e-6 / p.fitness if p.fitness else 0.0
    metrics = {"combined_score": score, "time_us": (p.fitness or 0.0) * 1e6,
               "correct": 1.0 if p.valid else 0.0}
    return OEProgram(id=p.id, code=p.code, language="cuda", parent_id=p.parent_id,
                     generation=p.generation, metrics=metrics, metadata={"island": p.island})


def openevolve_prompt(sampler: Any, parent: Program, insp: list[Program],
                      island: list[Program], iteration: int) -> str:
    ranked = sorted((oe_program(p) for p in island),
                    key=lambda q: q.metrics["combined_score"], reverse=True)
    cfg = sampler.config
    prompt = sampler.build_prompt(
        current_program=parent.code, parent_program=parent.code,
        program_metrics=oe_program(parent).metrics,
        previous_programs=[q.to_dict() for q in ranked[:cfg.num_top_programs]],
        top_programs=[q.to_dict() for q in
                      ranked[:cfg.num_top_programs + cfg.num_diverse_programs]],
        inspirations=[oe_program(p).to_dict() for p in insp], language="cuda",
        evolution_round=iteration, diff_based_evolution=True, program_artifacts=None,
        feature_dimensions=[])
    return render_prompt([{"role": "system", "content": prompt["system"]},
                          {"role": "user", "content": prompt["user"]}])


def load_openevolve(static: PromptStatic) -> tuple[list[tuple[str, Any]], str]:
    try:
        import openevolve
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "openevolve"],
                       check=False)
    try:
        import openevolve
        from openevolve.config import PromptConfig
        from openevolve.prompt.sampler import PromptSampler
    except ImportError as exc:
        return [], f"openevolve could not be installed ({exc}): its columns are skipped"
    ours = PromptConfig(system_message=system_message(static, CONTRACT))
    return ([("openevolve, our system message", PromptSampler(ours)),
             ("openevolve, its default system message", PromptSampler(PromptConfig()))],
            f"openevolve {getattr(openevolve, '__version__', '?')}")


def share(tokens: list[str], window: deque[list[str]]) -> float:
    return longest_prefix(tokens, window) / len(tokens) if tokens else 0.0


def run(iterations: int, seed: int, islands: int = 4) -> None:
    rng = random.Random(seed)
    random.seed(seed)  # OpenEvolve's template stochasticity draws from the global RNG
    static = PromptStatic(hardware=HARDWARE, reference=BASE)
    builder = PromptBuilder(static)
    samplers, oe_note = load_openevolve(static)
    archive = Archive(MapElitesConfig(islands=islands))
    pops: list[list[Program]] = [[] for _ in range(islands)]
    count = 0
    for isl in range(islands):
        code = BASE
        for _ in range(6):
            prog = new_program(count, code, None, isl, rng)
            pops[isl].append(prog)
            archive.insert(isl, prog)
            count += 1
            code = mutate(code, rng)
    names = ["kernforge"] + [name for name, _ in samplers]
    shares: dict[str, list[float]] = {n: [] for n in names}
    windows: dict[str, deque[list[str]]] = {n: deque(maxlen=16) for n in names}
    for it in range(iterations):
        isl = it % islands
        parent, insp = sample(archive, isl, rng)
        req = ProposalRequest(island=isl, parent=parent, inspirations=tuple(insp),
                              contract=CONTRACT, iteration=it)
        texts = [render_prompt(builder.build(req).messages)]
        texts += [openevolve_prompt(smp, parent, insp, pops[isl], it) for _, smp in samplers]
        for name, text in zip(names, texts):
            toks = tokenize(text)
            shares[name].append(share(toks, windows[name]))
            windows[name].append(toks)
        child = new_program(count, mutate(parent.code, rng), parent, isl, rng)
        pops[isl].append(child)
        archive.insert(isl, child)
        count += 1
        if (it + 1) % archive.config.migration_interval == 0:
            for m in archive.migrate():
                if m.accepted:
                    pops[m.dst].append(m.program)
    report(shares, oe_note, iterations)


def report(shares: dict[str, list[float]], oe_note: str, iterations: int) -> None:
    print(f"prefix reuse over {iterations} iterations (longest common token prefix with any of "
          f"the previous 16 prompts, share of the prompt)")
    print(f"tokenizer: {TOKENIZER}; {oe_note}")
    print(f"{'':42}{'mean':>8}{'median':>8}")
    for name, values in shares.items():
        print(f"{name:42}{statistics.mean(values):8.1%}{statistics.median(values):8.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    run(args.iterations, args.seed)


if __name__ == "__main__":
    main()
