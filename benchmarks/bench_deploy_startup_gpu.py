#!/usr/bin/env python3
"""Start-up cost of deploying into the CuPy example on a GPU: ``kernforge run --deploy`` against
``KERNFORGE_DEPLOY``, and where the launcher's time goes.

examples/heat3d_cupy.py does not import kernforge, so ``KERNFORGE_DEPLOY=spec python
heat3d_cupy.py`` deploys nothing (``env, app unaware``: it shows that). The environment's
counterpart of ``run --deploy`` is the same application run by a program that imports kernforge
first (a script: ``import kernforge``, then ``runpy.run_path`` of the application; the modes
``env, ...``). Modes, interleaved, the order rotating every round:

- ``plain``; ``imports kernforge`` (the wrapper, no spec): the baselines;
- ``env, app unaware``: ``KERNFORGE_DEPLOY=match.json python heat3d_cupy.py``;
- ``env, match`` / ``run --deploy, match``: a spec of ``heat_stencil`` recorded at ``--n N``
  whose variant is the recorded one (the tuned variant is compiled and its first launch
  re-verified, as for a real win);
- ``env, mismatch`` / ``run --deploy, mismatch``: ``heat_stencil`` recorded at ``--n N/2``
  (the launcher, the hooks and the matching; nothing compiled);
- ``native env`` / ``native run --deploy``: a native spec (deployed through the driver
  interposer) of ``heat_stencil`` recorded at ``--n N`` by the interposer alone (``kernforge
  record -- sh -c 'exec python heat3d_cupy.py ...'``), its entry the recorded image and
  geometry loaded from the spec's folder: ``native env`` runs the application with
  ``LD_PRELOAD`` and ``KERNFORGE_DEPLOY`` as ``kernforge run --deploy SPEC --print-env`` writes
  them (against ``plain``), ``native run --deploy`` through the launcher (against ``native
  env``; the spec is verified at its first start, in the warm-up, and kept). The launcher's
  report must say that launches ran the spec's entry (else the table says ``0 replaced``).

The launcher runs as the ``kernforge`` command does: its console script (beside the Python
interpreter) when there is one, else ``python -m kernforge``.

The table: median wall and CPU time (user + system, the children's) of each mode, the median of
the per-round differences to its counterpart (``vs``), and the median of the application's own
loop time (its line ``(X s including compilation)``: a tuned variant's compilation and
re-verification land there, not in the start-up). ``--profile DIR`` also writes, for one run
of each deploy mode, ``python -X importtime`` (``*.importtime.txt``) and a cProfile of the
whole process (``*.prof``, its top 40 by cumulative time in ``*.top.txt``).

    python benchmarks/bench_deploy_startup_gpu.py [--rounds 7] [--n 128] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median as med

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# an application that imports kernforge first: what KERNFORGE_DEPLOY deploys into
WRAP = ("import runpy\nimport sys\n\nimport kernforge  # noqa: F401\n\n"
        "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")


def make_spec(work: Path, n: int, name: str) -> Path:
    """A spec of heat_stencil recorded at ``--n n``, its variant the recorded one."""
    sys.path.insert(0, str(EXAMPLES))
    import heat3d_cupy  # type: ignore[import-not-found]

    from kernforge.deploy import entry_from_recording, write_spec
    from kernforge.record import install_cupy_hooks, load_recording, record

    install_cupy_hooks()
    with record(work / f"rec-{name}", kernels="heat_stencil", max_instances=1) as rec:
        heat3d_cupy.run(n, 2, diag_every=0)
    if not rec.paths:
        sys.exit(f"nothing recorded of heat_stencil at --n {n}: is CuPy using the GPU?")
    r = load_recording(rec.paths[0])
    entry = entry_from_recording(r, r.variant, baseline_s=2e-3, tuned_s=1e-3, speedup=2.0,
                                 speedup_ci=(1.9, 2.1), verified=True, idle=True)
    return write_spec(work / f"{name}.json", [entry])


def make_native_spec(work: Path, n: int, py: str) -> tuple[Path, dict[str, str]]:
    """A native spec of heat_stencil recorded at ``--n n`` by the interposer alone, and the
    variables that deploy it without the launcher (``--print-env``'s)."""
    from kernforge.deploy import interposed
    from kernforge.deploy import native as nd
    from kernforge.pipeline.run_app import record_command
    from kernforge.record.native_format import read_native

    app = [py, str(EXAMPLES / "heat3d_cupy.py"), "--n", str(n), "--steps", "2",
           "--diag-every", "0"]
    status, units, _, _ = record_command(["sh", "-c", 'exec "$0" "$@"', *app],
                                         work / "native-rec", max_instances=1,
                                         kernels="heat_stencil")
    if status != 0 or not units:
        sys.exit(f"the interposer recorded no heat_stencil (status {status})")
    rec = read_native(units[0])
    image = rec.image_bytes()
    e = nd.entry(rec, {"block": list(rec.block)}, "recorded.bin", image,
                 {"speedup": 1.0, "ci": [1.0, 1.0]})
    # any image's heat_stencil (the one kernel of that name): CuPy loads it from its disk
    # cache in the timed runs, NVRTC built it in the recorded one
    e["source_image"] = None
    spec = nd.write_spec(work / "native.json", [e], {"recorded.bin": image})
    lib, extra = interposed.deploy_env(spec, work / "native.interposer.tsv")
    preload = ":".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
    return spec, {"LD_PRELOAD": preload, **extra}


def kernforge(py: str) -> list[str]:
    """The ``kernforge`` command: its console script run by ``py``, else ``py -m kernforge``."""
    script = Path(py).with_name("kernforge")
    return [py, str(script)] if script.is_file() else [py, "-m", "kernforge"]


def timed(argv: list[str], env_extra: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s of the children, the application's own loop s, stderr) of one run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNFORGE_")}
    env.update(env_extra)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=EXAMPLES, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or "not deployed" in proc.stderr:
        sys.exit(f"{argv} failed (exit {proc.returncode}):\n{proc.stderr}")
    loop = re.search(r"\(([0-9.]+) s including compilation\)", proc.stdout)
    return (wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            float(loop.group(1)) if loop else float("nan"), proc.stderr)


def modes(py: str, app: list[str], match: Path, mismatch: Path, wrap: Path, native: Path,
          native_env: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str], str | None]]:
    def run_deploy(spec: Path) -> list[str]:
        return [*kernforge(py), "run", "--deploy", str(spec), "--", py, *app]

    wrapped = [py, str(wrap), *app]
    return {
        "plain": ([py, *app], {}, None),
        "imports kernforge": (wrapped, {}, "plain"),
        "env, app unaware": ([py, *app], {"KERNFORGE_DEPLOY": str(match)}, "plain"),
        "env, match": (wrapped, {"KERNFORGE_DEPLOY": str(match)}, "imports kernforge"),
        "run --deploy, match": (run_deploy(match), {}, "env, match"),
        "env, mismatch": (wrapped, {"KERNFORGE_DEPLOY": str(mismatch)}, "imports kernforge"),
        "run --deploy, mismatch": (run_deploy(mismatch), {}, "env, mismatch"),
        "native env": ([py, *app], native_env, "plain"),
        "native run --deploy": (run_deploy(native), {}, "native env"),
    }


def profile(out: Path, table: dict[str, tuple[list[str], dict[str, str], str | None]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (argv, extra, _) in table.items():
        if not name.startswith(("env, m", "run --deploy", "native run")):
            continue
        stem = out / name.replace(", ", "-").replace(" ", "_").replace("--", "")
        _, _, _, err = timed([argv[0], "-X", "importtime", *argv[1:]], extra)
        stem.with_suffix(".importtime.txt").write_text(err)
        prof = stem.with_suffix(".prof")
        timed([argv[0], "-m", "cProfile", "-o", str(prof), *argv[1:]], extra)
        with open(stem.with_suffix(".top.txt"), "w") as f:
            pstats.Stats(str(prof), stream=f).sort_stats("cumulative").print_stats(40)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--n", type=int, default=128, help="grid points per axis (default 128)")
    ap.add_argument("--steps", type=int, default=1, help="time steps (default 1)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="also write -X importtime and cProfile output of each deploy mode")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kernforge-startup-gpu-"))
    match, mismatch = make_spec(work, args.n, "match"), make_spec(work, args.n // 2, "mismatch")
    py = sys.executable
    app = ["heat3d_cupy.py", "--n", str(args.n), "--steps", str(args.steps), "--diag-every",
           "0"]
    wrap = work / "imports_kernforge.py"
    wrap.write_text(WRAP)
    native, native_env = make_native_spec(work, args.n, py)
    table = modes(py, app, match, mismatch, wrap, native, native_env)
    for argv, extra, _ in table.values():  # warm CuPy's kernel cache and the file cache
        timed(argv, extra)
    said = re.search(r"([0-9]+) launch\(es\) ran a tuned configuration",
                     timed(*table["native run --deploy"][:2])[3])
    print(f"native run --deploy: {said.group(1) if said else 0} replaced (heat_stencil)")
    print(f"the launcher: {' '.join(kernforge(py)[1:])}")
    walls: dict[str, list[float]] = {m: [] for m in table}
    cpus: dict[str, list[float]] = {m: [] for m in table}
    loops: dict[str, list[float]] = {m: [] for m in table}
    names = list(table)
    for r in range(args.rounds):
        for m in names[r % len(names):] + names[:r % len(names)]:
            wall, cpu, loop, _ = timed(*table[m][:2])
            walls[m].append(wall)
            cpus[m].append(cpu)
            loops[m].append(loop)
    print(f"{args.rounds} rounds, n={args.n}, steps={args.steps}, python "
          f"{sys.version.split()[0]}, PYTHONDONTWRITEBYTECODE="
          f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'mode':<26}{'wall s':>8}{'cpu s':>8}{'loop ms':>9}{'vs':>20}{'added ms':>10}"
          f"{'added cpu ms':>14}")
    rows = []
    for m, (_, _, base) in table.items():
        added = added_cpu = None
        if base is not None:
            added = med([1e3 * (a - b) for a, b in zip(walls[m], walls[base])])
            added_cpu = med([1e3 * (a - b) for a, b in zip(cpus[m], cpus[base])])
        rows.append({"mode": m, "vs": base, "wall_s": walls[m], "cpu_s": cpus[m],
                     "loop_s": loops[m], "added_ms": added, "added_cpu_ms": added_cpu})
        print(f"{m:<26}{med(walls[m]):>8.3f}{med(cpus[m]):>8.3f}{1e3 * med(loops[m]):>9.1f}"
              f"{base or '':>20}{'' if added is None else f'{added:.1f}':>10}"
              f"{'' if added_cpu is None else f'{added_cpu:.1f}':>14}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.profile is not None:
        profile(args.profile, table)
        print(f"profiles: {args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
