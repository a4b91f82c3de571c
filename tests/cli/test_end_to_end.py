"""End to end on the CPU backend, through the real `kernforge` command in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "heat3d_cpu.py"
APP_ARGS = ["--n", "24", "--steps", "6", "--diag-every", "3"]


def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], check=False, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("e2e")
    r = kf("record", "-o", str(tmp / "rec"), "--", "python", str(APP), *APP_ARGS, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return tmp / "rec"


@pytest.mark.slow
def test_app_output_identical_recorded_or_not(recorded: Path, tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True, text=True,
                           timeout=300, check=True).stdout
    under = kf("record", "-o", str(tmp_path / "r2"), "--", "python", str(APP), *APP_ARGS,
               cwd=tmp_path)
    assert under.returncode == 0, under.stderr
    checksum = [ln for ln in plain.splitlines() if "checksum" in ln]
    assert checksum and checksum[0] in under.stdout


def test_every_kernel_recorded_and_inspectable(recorded: Path) -> None:
    r = kf("inspect", str(recorded), "--json", cwd=recorded.parent)
    assert r.returncode == 0, r.stderr
    units = json.loads(r.stdout)
    names = {u["kernel"] for u in units}
    assert names == {"heat_step", "apply_boundary", "max_change"}
    per_kernel = {n: sum(u["kernel"] == n for u in units) for n in names}
    assert per_kernel["heat_step"] == 4 and per_kernel["apply_boundary"] == 4  # default cap
    assert per_kernel["max_change"] == 2  # only two diagnostics in 6 steps


@pytest.mark.slow
def test_replay_prints_ok_with_median(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    r = kf("replay", str(recorded), "--repeat", "3", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout and "WRONG" not in r.stdout
    data = json.loads(out.read_text())
    assert len(data) == 10 and all(d["status"] == "OK" and d["median"] > 0 for d in data)
    assert all(len(d["samples"]) == 3 for d in data)


@pytest.mark.slow
def test_wrong_variant_exits_nonzero_naming_buffer(recorded: Path, tmp_path: Path) -> None:
    r = kf("replay", str(recorded), "--kernels", "heat_step", "--define", "CENTER_WEIGHT=5.0",
           "--repeat", "1", cwd=tmp_path)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "WRONG_RESULT" in r.stdout
    assert "buffer v:" in r.stderr and "max abs" in r.stderr


@pytest.mark.slow
def test_behaviour_preserving_define_and_options_verify(recorded: Path, tmp_path: Path) -> None:
    r = kf("replay", str(recorded), "--kernels", "heat_step", "--define", "TILE_J=4",
           "--opt", "opt_level=O3", "--opt", "unroll=true", "--repeat", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_bad_input_gets_typed_errors(recorded: Path, tmp_path: Path) -> None:
    r = kf("replay", str(tmp_path / "nowhere"), cwd=tmp_path)  # a path that does not exist
    assert r.returncode == 2 and "hint:" in r.stderr  # is bad input (4: an unusable recording)
    r = kf("replay", str(recorded), "--opt", "opt_level=O9", "--repeat", "1", cwd=tmp_path)
    # a value the backend refuses is bad input, like a malformed one (issue 32): exit 2
    assert r.returncode == 2 and "INVALID_CONFIG" in r.stdout + r.stderr
    r = kf("replay", str(recorded), "--define", "broken", cwd=tmp_path)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = kf("record", "--", "python", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert r.returncode == 2 and "not found" in r.stderr


@pytest.mark.slow
def test_fast_math_needs_tolerance(recorded: Path, tmp_path: Path) -> None:
    r = kf("replay", str(recorded), "--kernels", "heat_step", "--opt", "fast_math=true",
           "--repeat", "1", cwd=tmp_path)
    assert r.returncode == 2 and "tolerance" in (r.stdout + r.stderr)  # refused: bad input
    r = kf("replay", str(recorded), "--kernels", "heat_step", "--opt", "fast_math=true",
           "--tolerance", "norm:1e-9", "--repeat", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_a_crashing_application_still_lists_what_was_recorded(tmp_path: Path) -> None:
    app = tmp_path / "python_sim.py"  # a script whose name starts with "python"
    app.write_text(
        "import numpy as np, kernforge\n"
        "k = kernforge.Kernel('void z(double *y, int n) { for (int i = 0; i < n; i++) y[i] = 0; }',"
        " 'z', backend='cpu')\n"
        "k(np.ones(8), 8)\n"
        "raise RuntimeError('the application fails here')\n")
    r = kf("record", "-o", str(tmp_path / "rec"), "--", str(app), cwd=tmp_path)
    assert r.returncode == 8  # the application failed (its status 1 printed)
    assert "RuntimeError: the application fails here" in r.stderr
    assert "recorded 1 kernel launch" in r.stdout and "z-0" in r.stdout


# end to end; tuning and its resume: tests/replay/test_tuning.py
@pytest.mark.slow
def test_tune_finds_a_verified_configuration_and_resumes(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = kf("tune", str(recorded), "--kernels", "heat_step", "--preset", "quick", "--trials", "5",
           "--repeat", "3", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    results = sorted(out.glob("*/result.json"))
    assert len(results) == 4  # four recorded heat_step launches
    data = json.loads(results[0].read_text())
    assert data["evaluations"] == 5 and data["speedup"] > 0
    r = kf("tune", str(recorded), "--kernels", "heat_step", "--preset", "quick", "--trials", "5",
           "--out", str(out), cwd=tmp_path)
    assert r.returncode == 2 and "--resume" in r.stderr


# end to end; its steps: tests/pipeline/test_demo_*.py, tests/cli/test_demo_cmd.py
@pytest.mark.slow
def test_demo_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    r = kf("demo", "--backend", "cpu", "--n", "24", "--steps", "6", "--trials", "4",
           "--repeat", "2", "--iterations", "3", "--inner-trials", "2", "--rounds", "1",
           "--out", str(tmp_path / "demo"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["backend"] == "cpu" and all(b["status"] == "OK" for b in summary["baseline"])
    assert summary["wrong"]["status"] == "WRONG_RESULT"
    assert summary["tuned"]["speedup_interleaved"] > 0
    assert (Path(summary["tuned"]["result"]).parent / "history.png").is_file()
    evolved = summary["evolve"]  # every recorded kernel, evolved
    assert {"heat_step", "apply_boundary"} <= {e["kernel"] for e in evolved}
    assert all(Path(e["report"]).is_file() for e in evolved)
    e2e = summary["end_to_end"]
    if e2e is not None:  # a verified winner was deployed: same output, launches replaced
        assert e2e["outputs_identical"] and e2e["launches_replaced"] > 0
        assert "end-to-end speedup" in r.stdout
    # only winners the application ran faster with, alone, are deployed
    kept = {c["kernel"] for c in summary["confirmed"] if c["kept"]}
    assert all(c["speedup"] > 1 and c["outputs_identical"] and c["launches_replaced"] > 0
               for c in summary["confirmed"] if c["kept"])
    assert ({w["kernel"] for w in e2e["winners"]} if e2e is not None else set()) == kept
