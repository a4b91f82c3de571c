"""``kernforge run --deploy`` imports what the launch needs and nothing more (docs/deploy.md,
"Start-up cost"): the application it starts pays no more start-up than one started with
``$KERNFORGE_DEPLOY``. Guarded by what is in ``sys.modules``, not by a timing: the real CLI in
a fresh interpreter, for a Python spec (the application in the same process) and a native
spec (the program in a child, through the interposer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.deploy import entry_from_recording, write_spec
from kernforge.deploy import native as nd
from kernforge.record import load_recording, record
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

# never needed to launch an application with a spec: the other commands' dependencies
HEAVY = ("rich", "optuna", "dask", "distributed", "cupy", "matplotlib", "pydantic", "sqlite3",
         "openai", "psutil", "yaml", "tomllib", "tomli", "scipy", "torch", "cffi")
# kernforge's own: the other commands, the capture, the replay engine, search and service
OTHER = ("kernforge.cli.demo_cmd", "kernforge.cli.tune_cmd", "kernforge.cli.export_cmd",
         "kernforge.pipeline.units", "kernforge.cli.checks", "kernforge.cli.output",
         "kernforge.record.capture", "kernforge.record.native_format", "kernforge.replay.engine",
         "kernforge.replay.native", "kernforge.tune", "kernforge.evolve", "kernforge.service",
         "kernforge.harness", "kernforge.forge", "kernforge.apps", "kernforge.stencil",
         "kernforge.llm")
# a launch needs none of these until a kernel of the spec launches (deploy/startup.py): the
# launcher deploys a Python spec as $KERNFORGE_DEPLOY does; nor the other way of deploying
DEFERRED = ("numpy", "tempfile", "kernforge.deploy.runtime", "kernforge.deploy.decide",
            "kernforge.deploy.match", "kernforge.deploy.spec", "kernforge.deploy.entries",
            "kernforge.deploy.reverify", "kernforge.backends.cupy_hooks",
            "kernforge.pipeline.run_app", "kernforge.pipeline.env_prefix",
            "kernforge.deploy.interposed", "kernforge.deploy.native", "kernforge.record.interposer")
# a native spec's launch: the spec's checks, its lines and the interposer, nothing of Python's
NATIVE_DEFERRED = ("numpy", "dataclasses", "ctypes", "uuid", "importlib.resources",
                   "kernforge.backends.driver", "kernforge.deploy.startup",
                   "kernforge.pipeline.pyapp", "kernforge.pipeline.run_app")
# the application: what the launcher imported by the time the application runs
PROBE = """import json, sys
print("MODULES " + json.dumps(sorted(sys.modules)))
"""
# the launcher as the kernforge command runs it, and what it holds once the program ended
AFTER = """import json, sys
from kernforge.cli.main import main
status = main(sys.argv[1:])
print("MODULES " + json.dumps(sorted(sys.modules)))
sys.exit(status)
"""
OTHER_APP = """import numpy as np
from kernforge.backends import Kernel
Kernel('def scale(x: "double *", n: "int") -> None:\\n    x[:n] = 2 * x[:n]\\n', "scale",
       backend="null")(np.ones(4), 4)
"""
AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
'''


def _modules(proc: subprocess.CompletedProcess[str]) -> set[str]:
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line[len("MODULES "):]))


def _unneeded(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY
                  or any(m == o or m.startswith(o + ".") for o in OTHER))


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNFORGE_")}
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD"):  # the fixtures' (monkeypatched) values
        if k in os.environ:
            env[k] = os.environ[k]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def python_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lean")
    with record(root / "rec") as rec:
        Kernel(AXPY, "axpy", backend="null")(np.arange(4.0), np.ones(4), 2.0, 4)
    unit = load_recording(rec.paths[0])
    entry = entry_from_recording(unit, unit.variant.with_(options={"opt_level": "O3"}),
                                 baseline_s=2e-3, tuned_s=1e-3, speedup=2.0,
                                 speedup_ci=(1.9, 2.1))
    (root / "probe.py").write_text(PROBE)
    return write_spec(root / "spec.json", [entry])


def test_a_python_application_starts_with_nothing_it_does_not_need(python_spec: Path) -> None:
    root = python_spec.parent
    seen = _modules(_run([sys.executable, "-m", "kernforge", "run", "--deploy",
                          str(python_spec), "--", "python", "probe.py"], root))
    assert "kernforge.cli.run_cmd" in seen  # it did go through the launcher
    assert _unneeded(seen) == []
    assert "kernforge.deploy.startup" in seen  # the spec is deployed ...
    assert sorted(set(DEFERRED) & seen) == []  # ... and nothing of it is made yet


def test_the_launcher_of_an_application_that_launches_no_kernel_of_the_spec_stays_lean(
        python_spec: Path) -> None:
    """Also at the end: what the launcher holds once the application has ended (its report
    written) holds nothing of the matching rules when no kernel of the spec launched."""
    root = python_spec.parent
    (root / "other.py").write_text(OTHER_APP)
    proc = _run([sys.executable, "-c", AFTER, "run", "--deploy", str(python_spec), "--",
                 "python", "other.py"], root)
    seen = _modules(proc)
    assert "scale: runs the original (not in the spec" in proc.stderr
    assert "0 launch(es) ran a tuned variant, 1 the original" in proc.stderr
    assert "scale: 0 replaced, 1 fallback (not in the spec: 1)" in proc.stderr
    assert "numpy" in seen  # the application's own
    assert sorted(set(DEFERRED) & seen) == ["numpy"]


def test_the_launcher_imports_nothing_of_what_it_guards_against_by_itself(
        python_spec: Path) -> None:
    """The check can fail: the full command line parser imports the other commands."""
    code = ("import json, sys\nfrom kernforge.cli.main import build_parser\nbuild_parser()\n"
            "print('MODULES ' + json.dumps(sorted(sys.modules)))")
    seen = _modules(_run([sys.executable, "-c", code], python_spec.parent))
    assert "rich" in _unneeded(seen) and "kernforge.cli.demo_cmd" in _unneeded(seen)


def test_a_native_program_is_started_by_a_lean_launcher(
        on_fake: FakeCuda, tmp_path: Path, record_fake: Callable[..., tuple[Any, ...]]) -> None:
    fake = on_fake
    status, units, _, _ = record_fake(tmp_path / "rec", max_instances=1, kernels="heat")
    assert status == 0 and len(units) == 1
    image = fake.image(tuned=True)
    e = nd.entry(read_native(units[0]), {"block": [64, 1, 1], "carveout": 0}, "tuned.bin",
                 image, {"speedup": 1.5, "ci": [1.4, 1.6]})
    spec = nd.write_spec(tmp_path / "spec.json", [e], {"tuned.bin": image})
    proc = _run([sys.executable, "-c", AFTER, "run", "--deploy", str(spec), "--",
                 *fake.command()], tmp_path)
    seen = _modules(proc)
    assert "10 launch(es) ran a tuned configuration" in proc.stderr  # it did deploy
    assert "kernforge.cli.native_launch" in seen
    assert _unneeded(seen) == []
    assert "numpy" not in seen  # a native program needs no array of kernforge's
    assert sorted(set(NATIVE_DEFERRED) & seen) == []
