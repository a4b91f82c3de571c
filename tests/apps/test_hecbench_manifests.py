"""benchmarks/hecbench_apps.py: bad input exits 2, nothing written exits 1, and what it
writes is a manifest ``kernforge app run`` reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernforge.apps.manifest import load_manifest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hecbench_apps.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_missing_bin_directory_is_bad_input(tmp_path: Path) -> None:
    r = _run("--bin", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m"))
    assert r.returncode == 2 and "no such directory" in r.stderr
    assert not (tmp_path / "m").exists()


def test_unknown_names_and_no_binaries(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    r = _run("--bin", str(tmp_path / "bin"), "--out", str(tmp_path / "m"), "--only", "bogus")
    assert r.returncode == 2 and "unknown program(s) ['bogus']" in r.stderr
    r = _run("--bin", str(tmp_path / "bin"), "--out", str(tmp_path / "m"), "--only", "heat")
    assert r.returncode == 1 and "no manifest written" in r.stderr


def test_a_written_manifest_loads(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "heat-cuda").write_text("")
    r = _run("--bin", str(tmp_path / "bin"), "--out", str(tmp_path / "m"), "--only", "heat")
    assert r.returncode == 0, r.stderr
    m = load_manifest(tmp_path / "m" / "heat.toml")
    assert m.name == "heat" and [d.name for d in m.datasets] == ["d0", "d1"]


def test_a_program_timed_by_its_own_timer(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "heat2d-cuda").write_text("")
    r = _run("--bin", str(tmp_path / "bin"), "--out", str(tmp_path / "m"), "--only", "heat2d")
    assert r.returncode == 0, r.stderr
    timer = load_manifest(tmp_path / "m" / "heat2d.toml").timer
    assert timer.kind == "regex" and timer.unit == "us"
    assert timer.pattern is not None and timer.describe().startswith("the program's own")
