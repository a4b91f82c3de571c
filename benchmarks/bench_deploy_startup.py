#!/usr/bin/env python3
"""Start-up cost of deploying: through the environment (``KERNFORGE_DEPLOY=spec.json``) and
through the launcher (``kernforge run --deploy spec.json -- python app.py``).

``kernforge run --deploy --print-env`` and ``kernforge app`` (M4) deploy into a Python program
by setting ``KERNFORGE_DEPLOY``: ``import kernforge`` then activates the spec. Every process
pays for that, also when no entry of the spec matches, so a short run can lose more to the
start-up than a tuned kernel wins (docs/deploy.md, "Start-up cost"). ``kernforge run
--deploy`` runs the application in its own process: it must add no more than that (the
``run --deploy`` modes, compared with their ``KERNFORGE_DEPLOY`` counterparts).

The unchanged example examples/heat3d_cpu.py (``--n 64 --steps 30 --diag-every 0``, the
``n64`` dataset of examples/apps/heat3d_cpu.toml) runs as a whole process, in rounds, once per
mode and round, the order of the modes rotating every round:

- ``plain``: without ``KERNFORGE_DEPLOY``;
- ``deploy, no match``: a spec whose one entry is ``heat_step`` recorded at ``--n 16``: the
  kernel launches, its problem never matches (the finding this measures);
- ``deploy, never launched``: a spec whose one entry is ``max_change``, which this run never
  launches (``--diag-every 0``);
- ``run --deploy, no match`` / ``run --deploy, never launched``: the same two specs through
  ``python -m kernforge run --deploy SPEC -- python heat3d_cpu.py ...`` (what the ``kernforge``
  command runs), compared with ``deploy, no match`` / ``deploy, never launched``;
- ``import only`` / ``import only, deploy``: ``python -c "import kernforge"`` without and with
  the first spec (the start-up alone, less noisy than the run);
- ``run --deploy, import only``: ``kernforge run --deploy`` of the first spec running a script
  that only imports kernforge, against ``import only, deploy`` (the launcher's own start-up,
  the least noisy comparison of the two ways).

With ``--native``, also a native spec on the fake CUDA driver (kernforge.testing.fakedriver,
no GPU needed; its program ``fake_app``, 10 launches of ``heat``, one entry replacing them):
``native plain``, ``native env`` (``LD_PRELOAD`` and ``KERNFORGE_DEPLOY`` as ``kernforge run
--deploy SPEC --print-env`` writes them) and ``native run --deploy`` against it: the launcher
is a Python process started before the program, which runs in a few milliseconds. The spec is
verified at its first start (in the warm-up, once the files are older than
``linecache.RACY_NS``) and kept (deploy/linecache.py): ``native run --deploy`` is every later
start; ``native run --deploy, verified`` removes the kept record before each round, so
that each start checks the spec's signature and image hashes again; ``native python, spawn
only`` is the least any Python launcher costs: an interpreter that only starts the program
(``posix_spawn``, with ``--print-env``'s variables) and waits for it.

The launcher runs as the ``kernforge`` command does: its console script (beside the Python
interpreter) when there is one, else ``python -m kernforge`` (which adds ``runpy``).

The table gives each mode's median wall time over the rounds, and the median over the rounds of
the difference to its counterpart (the column ``vs``: the run's ``plain``, ``import only``, or
the same spec through the environment) with the quartiles of those differences, in wall time
and in CPU time (user + system of the process and its children: less disturbed by a busy
machine). The specs
are made here (a recording of the example at ``--n 16`` and an ``-O3`` variant; they are not
tuned, as this measures only matching) unless ``--spec`` names one to use for both deploy modes.

    python benchmarks/bench_deploy_startup.py [--rounds 15] [--spec deploy.json] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
APP_ARGS = ["heat3d_cpu.py", "--n", "64", "--steps", "30", "--diag-every", "0"]
# mode -> (command, spec or variables, the mode it is compared with)
Modes = dict[str, tuple[list[str], "Path | dict[str, str] | None", "str | None"]]


def make_specs(work: Path) -> tuple[Path, Path]:
    """(a spec for heat_step at n=16, a spec for max_change): entries as export writes them."""
    sys.path.insert(0, str(EXAMPLES))
    import heat3d_cpu  # type: ignore[import-not-found]

    from kernforge.deploy import entry_from_recording, write_spec
    from kernforge.record import load_recording, record

    with record(work / "rec") as rec:
        heat3d_cpu.run(16, 2, 1, None, True)
    units = {load_recording(p).name.rsplit("-", 1)[0]: load_recording(p) for p in rec.paths}
    paths = []
    for kernel in ("heat_step", "max_change"):
        r = units[kernel]
        entry = entry_from_recording(r, r.variant.with_(options={"opt_level": "O3"}),
                                     baseline_s=2e-3, tuned_s=1e-3, speedup=2.0,
                                     speedup_ci=(1.9, 2.1))
        paths.append(write_spec(work / f"{kernel}.json", [entry]))
    return paths[0], paths[1]


def make_native(work: Path) -> tuple[list[str], Path, dict[str, str], dict[str, str]]:
    """The fake driver's program, a native spec replacing its ``heat`` launches, the
    environment that deploys the spec without the launcher, and the fake driver's own."""
    from kernforge.deploy import interposed
    from kernforge.deploy import native as nd
    from kernforge.pipeline.run_app import record_command
    from kernforge.record.native_format import read_native
    from kernforge.testing.fakedriver import build

    fake = build(work / "fakecuda")
    driver = {"LD_LIBRARY_PATH": str(fake.libdir)}
    saved = {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    os.environ.update(driver)
    os.environ.pop("LD_PRELOAD", None)
    try:
        status, units, _, _ = record_command(fake.command(), work / "native-rec",
                                             max_instances=1, kernels="heat")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if status != 0 or len(units) != 1:
        sys.exit(f"recording the fake driver's program failed (status {status})")
    image = fake.image(tuned=True)
    entry = nd.entry(read_native(units[0]), {"block": [64, 1, 1], "carveout": 0}, "tuned.bin",
                     image, {"speedup": 1.5, "ci": [1.4, 1.6]})
    spec = nd.write_spec(work / "native.json", [entry], {"tuned.bin": image})
    lib, extra = interposed.deploy_env(spec, work / "native.tsv")
    return fake.command(), spec, {**driver, "LD_PRELOAD": str(lib), **extra}, driver


# the least a Python launcher costs: an interpreter that starts the program and waits for it
SPAWN_ONLY = ("import os, sys\n"
              "os.waitpid(os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ), 0)\n")


def kernforge(py: str) -> list[str]:
    """The ``kernforge`` command: its console script run by ``py``, else ``py -m kernforge``."""
    script = Path(py).with_name("kernforge")
    return [py, str(script)] if script.is_file() else [py, "-m", "kernforge"]


def launcher(py: str, spec: Path, app: list[str] = APP_ARGS) -> list[str]:
    """``kernforge run --deploy SPEC -- python APP ARGS``, as the ``kernforge`` command runs it
    (its log lines and report included)."""
    return [*kernforge(py), "run", "--deploy", str(spec), "--", py, *app]


def timed(argv: list[str], spec: Path | dict[str, str] | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process; ``spec``: deployed through
    ``KERNFORGE_DEPLOY``, or (a dict) the variables to set."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KERNFORGE_") or k == "KERNFORGE_CACHE_DIR"}
    if isinstance(spec, dict):
        env.update(spec)
    elif spec is not None:
        env["KERNFORGE_DEPLOY"] = str(spec)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=EXAMPLES, env=env, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if proc.returncode != 0 or "not deployed" in proc.stderr:
        sys.exit(f"{argv} failed (exit {proc.returncode}):\n{proc.stderr}")
    return seconds, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="rounds (default 15)")
    ap.add_argument("--spec", type=Path, default=None, help="use this spec for both")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--native", action="store_true",
                    help="also a native spec on the fake CUDA driver (see above)")
    ap.add_argument("--native-only", action="store_true",
                    help="only the native modes (no heat3d_cpu runs: shorter, less noisy)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kernforge-startup-"))
    py = sys.executable
    modes: Modes = {} if args.native_only else python_modes(args, work, py)
    prepare: dict[str, Callable[[], object]] = {}  # done before a mode's run, not timed
    if args.native or args.native_only:
        program, native, env, driver = make_native(work)
        run_native = [*kernforge(py), "run", "--deploy", str(native), "--", *program]
        native_modes: Modes = {
            "native plain": (program, driver, None),
            "native env": (program, env, "native plain"),
            "native run --deploy": (run_native, driver, "native env"),
            "native run --deploy, verified": (run_native, driver, "native env"),
            "native python, spawn only": ([py, "-c", SPAWN_ONLY, *program], env, "native env")}
        modes.update(native_modes)
        try:
            from kernforge.deploy import linecache
        except ImportError:  # a kernforge that verifies at every start
            pass
        else:
            record = Path(linecache.record_path(str(native)))
            prepare["native run --deploy, verified"] = lambda: record.unlink(missing_ok=True)
            # a spec younger than RACY_NS is verified at every start (as one just exported)
            time.sleep(linecache.RACY_NS / 1e9 + 0.1)
    print(f"the launcher: {' '.join(kernforge(py)[1:])}")
    for m, (argv, spec, _) in modes.items():  # warm the compile caches and the file cache
        prepare.get(m, lambda: None)()
        timed(argv, spec)
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(args.rounds):
        for m in names[r % len(names):] + names[:r % len(names)]:
            argv, spec, _ = modes[m]
            prepare.get(m, lambda: None)()
            wall, cpu = timed(argv, spec)
            times[m].append(wall)
            cpus[m].append(cpu)
    report(args, modes, times, cpus)
    return 0


def python_modes(args: argparse.Namespace, work: Path, py: str) -> Modes:
    nomatch, unused = (args.spec, args.spec) if args.spec else make_specs(work)
    import_only = work / "import_only.py"
    import_only.write_text("import kernforge\n")
    return {
        "plain": ([py, *APP_ARGS], None, None),
        "deploy, no match": ([py, *APP_ARGS], nomatch, "plain"),
        "deploy, never launched": ([py, *APP_ARGS], unused, "plain"),
        "run --deploy, no match": (launcher(py, nomatch), None, "deploy, no match"),
        "run --deploy, never launched": (launcher(py, unused), None, "deploy, never launched"),
        "import only": ([py, "-c", "import kernforge"], None, None),
        "import only, deploy": ([py, "-c", "import kernforge"], nomatch, "import only"),
        "run --deploy, import only": (launcher(py, nomatch, [str(import_only)]), None,
                                      "import only, deploy"),
    }


def report(args: argparse.Namespace, modes: Modes, times: dict[str, list[float]],
           cpus: dict[str, list[float]]) -> None:
    rows = []
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, python "
          f"{sys.version.split()[0]}, PYTHONDONTWRITEBYTECODE="
          f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    print("added ms: the median of the per-round differences to vs, (q1, q3) their quartiles")
    print(f"{'mode':<30}{'median s':>10}{'vs':>24}{'added ms':>10}{'(q1, q3) ms':>16}"
          f"{'cpu s':>8}{'added cpu ms':>14}")
    for m, (_, _, base) in modes.items():
        med = statistics.median(times[m])
        cpu = statistics.median(cpus[m])
        added = added_cpu = None
        spread = ""
        if base is not None:
            diffs = [1e3 * (a - b) for a, b in zip(times[m], times[base])]
            added = statistics.median(diffs)
            added_cpu = statistics.median(1e3 * (a - b) for a, b in zip(cpus[m], cpus[base]))
            q1, _, q3 = statistics.quantiles(diffs, n=4)
            spread = f"({q1:.0f}, {q3:.0f})"
        rows.append({"mode": m, "median_s": med, "vs": base, "added_ms": added,
                     "times_s": times[m], "cpu_s": cpu, "added_cpu_ms": added_cpu,
                     "cpus_s": cpus[m]})
        print(f"{m:<30}{med:>10.4f}{base or '':>24}"
              f"{'' if added is None else f'{added:.1f}':>10}{spread:>16}"
              f"{cpu:>8.3f}{'' if added_cpu is None else f'{added_cpu:.1f}':>14}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
