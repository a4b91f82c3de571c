"""``kernforge export`` and ``kernforge run --deploy`` end to end on examples/heat3d_cpu.py, in
subprocesses; ``KERNFORGE_DEPLOY`` honoured when kernforge is imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import resign, write_result

from kernforge.deploy import read_spec
from kernforge.record import find_recordings, load_recording
from kernforge.replay import compare

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "heat3d_cpu.py"
APP_ARGS = ["--n", "24", "--steps", "6", "--diag-every", "3"]
TUNED = {"options": {"opt_level": "O3"}}
pytestmark = pytest.mark.reverify  # the deploying process re-verifies O3 on its first launch


def kf(*args: str, cwd: Path, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def checksum(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if "checksum" in ln]
    assert len(lines) == 1, stdout
    return lines[0]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """Recordings of the app and a tuning run directory of signed result.json files:
    heat_step-0 with O3 (the medians compare() measured; speedup and interval stated, since a
    measured one on a loaded CI machine need not be significant, and export would rightly
    refuse it), heat_step-1 the same problem but slower, apply_boundary-0 below the
    threshold, max_change-0 without a valid trial. Returns the run directory and the
    threshold."""
    tmp = tmp_path_factory.mktemp("deploy-e2e")
    r = kf("record", "-o", str(tmp / "rec"), "--", "python", str(APP), *APP_ARGS, cwd=tmp)
    assert r.returncode == 0, r.stderr
    recs = {p.name: load_recording(p) for p in find_recordings(tmp / "rec")}
    ab = compare(recs["heat_step-0"], {}, TUNED, passes=3, per_pass=1, warmup=1)
    run = tmp / "run"
    path = write_result(run / "heat_step-0", recs["heat_step-0"], TUNED, speedup=2.0)
    resign(path, baseline_median_s=ab.median_a, best_median_s=ab.median_b)
    write_result(run / "heat_step-1", recs["heat_step-1"], TUNED, speedup=1.8)
    floor = 1.0
    write_result(run / "apply_boundary-0", recs["apply_boundary-0"], TUNED, speedup=floor / 2)
    write_result(run / "max_change-0", recs["max_change-0"], TUNED, status="NO_VALID_TRIAL")
    return run, floor


@pytest.fixture(scope="module")
def run_dir(tuned: tuple[Path, float]) -> Path:
    return tuned[0]


@pytest.fixture(scope="module")
def spec(tuned: tuple[Path, float]) -> Path:
    run, floor = tuned
    out = run / "spec.json"
    if not out.exists():
        r = kf("export", str(run), "-o", str(out), "--min-speedup", str(floor), cwd=run)
        assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_export_writes_the_spec(tuned: tuple[Path, float], tmp_path: Path) -> None:
    run_dir, floor = tuned
    out = tmp_path / "spec.json"
    r = kf("export", str(run_dir), "-o", str(out), "--min-speedup", str(floor), cwd=run_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 tuned kernel launch(es) exported" in r.stdout and "opt_level=O3" in r.stdout
    assert re.search(r"apply_boundary-0/result.json: (not faster|inconclusive)", r.stderr)
    assert "status NO_VALID_TRIAL" in r.stderr and "same kernel and problem" in r.stderr
    (entry,) = read_spec(out).entries
    assert entry.kernel.entry == "heat_step" and entry.variant.options["opt_level"] == "O3"
    assert entry.evidence.recording.endswith("heat_step-0")


@pytest.mark.slow
def test_export_with_nothing_above_the_threshold(run_dir: Path, tmp_path: Path) -> None:
    r = kf("export", str(run_dir), "-o", str(tmp_path / "s.json"), "--min-speedup", "100",
           cwd=tmp_path)
    assert r.returncode == 1 and "nothing to export" in r.stderr
    assert not (tmp_path / "s.json").exists()
    r = kf("export", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "no tuning results" in r.stderr


def test_run_deploy_identical_output(spec: Path, tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True,
                           text=True, timeout=300, check=True).stdout
    report = tmp_path / "report.json"
    r = kf("run", "--deploy", str(spec), "--report", str(report), "--", "python", str(APP),
           *APP_ARGS, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert checksum(r.stdout) == checksum(plain)
    # the first launch ran the original and was compared with the tuned variant: counted
    # as the re-verification, not as a fallback
    assert "heat_step: 5 replaced, 1 re-verification run, 0 fallback" in r.stderr
    assert "(1 more ran the original to re-verify a tuned variant)" in r.stderr
    assert "heat_step: runs the tuned variant" in r.stderr
    assert "heat_step: tuned variant re-verified against the original kernel" in r.stderr
    data = json.loads(report.read_text())
    assert data["kernels"]["heat_step"] == {"replaced": 5, "verified": 1, "fallback": 0,
                                            "reasons": {}}
    assert data["kernels"]["apply_boundary"] == {"replaced": 0, "verified": 0, "fallback": 7,
                                                 "reasons": {"not in the spec": 7}}


def test_run_deploy_refuses_a_bad_spec(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = kf("run", "--deploy", str(bad), "--", "python", str(APP), *APP_ARGS, cwd=tmp_path)
    assert r.returncode == 2 and "truncated" in r.stderr and "checksum" not in r.stdout


SHOW = ("import json, runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__'); import kernforge; "
        "print('REPORT', json.dumps(kernforge.deploy.report().to_json()))")


def test_environment_variable(spec: Path, tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True,
                           text=True, timeout=300, check=True).stdout
    env = {**os.environ, "KERNFORGE_DEPLOY": str(spec)}
    r = subprocess.run([sys.executable, "-c", SHOW, str(APP), *APP_ARGS], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert checksum(r.stdout) == checksum(plain)
    report = json.loads(r.stdout.split("REPORT ", 1)[1])
    assert report["kernels"]["heat_step"]["replaced"] == 5
    env["KERNFORGE_DEPLOY"] = str(tmp_path / "missing.json")
    r = subprocess.run([sys.executable, str(APP), *APP_ARGS], env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0 and checksum(r.stdout) == checksum(plain)
    assert "not deployed" in r.stderr and "no such deployment spec" in r.stderr


@pytest.mark.slow
def test_export_says_the_confidence_of_the_intervals(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir / "heat_step-0", run / "heat_step-0")
    doc = json.loads((run / "heat_step-0" / "result.json").read_text())
    wide = {**os.environ, "COLUMNS": "200"}
    r = kf("export", str(run), "-o", str(tmp_path / "a.json"), "--min-speedup", "1", cwd=run,
           env=wide)
    assert r.returncode == 0 and "┃ CI " in r.stdout, r.stdout  # the result does not say it
    resign(run / "heat_step-0" / "result.json", interleaved={
        "median_a": doc["baseline_median_s"], "median_b": doc["best_median_s"],
        "confidence": 1 - 0.01 / 3})
    r = kf("export", str(run), "-o", str(tmp_path / "b.json"), "--min-speedup", "1", cwd=run,
           env=wide)
    assert r.returncode == 0 and "┃ 99.67% CI " in r.stdout, r.stdout
