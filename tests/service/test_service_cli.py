"""`kernforge serve start|status|stop` and Client.from_state, through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge.service import Client

# end to end through a daemon; stopping the process group: test_service_units.py
pytestmark = pytest.mark.slow


def kf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", "serve", *args], check=False,
                          capture_output=True, text=True, timeout=180)


def test_serve_start_status_stop(tmp_path: Path, rec_path: Path, rec) -> None:
    state = tmp_path / "serve.json"
    r = kf("start", "--state", str(state), "--workers", "1", "--preload", str(rec_path))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        data = json.loads(state.read_text())
        assert data["address"].startswith("tcp://127.0.0.1:") and data["pid"] > 0
        again = kf("start", "--state", str(state))
        assert again.returncode == 2 and "already runs" in again.stderr
        with Client.from_state(state) as client:
            assert client.evaluate(rec, warmup=1, repeat=3).ok
        r = kf("status", "--state", str(state), "--json")
        assert r.returncode == 0, r.stderr
        status = json.loads(r.stdout)
        (worker,) = status["workers"]
        assert str(rec_path.resolve()) in worker["recordings"]
        assert status["metrics"]["evaluations"] >= 1
        assert "evaluations" in kf("status", "--state", str(state)).stdout
    finally:
        r = kf("stop", "--state", str(state))
    assert r.returncode == 0, r.stderr
    assert not state.exists()
    gone = kf("status", "--state", str(state))
    assert gone.returncode == 2 and "kernforge serve start" in gone.stderr
