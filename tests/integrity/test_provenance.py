"""Provenance, figure files, regeneration, and the idle-device check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernforge.backends import get_backend
from kernforge.core import ConfigError
from kernforge.harness.provenance import (
    idle_check,
    provenance,
    read_figure,
    regenerate,
    write_figure,
)


def test_provenance_names_everything_a_figure_needs() -> None:
    prov = provenance(get_backend("cpu"), command=["kernforge", "integrity", "validate", "u"])
    for key in ("command", "cwd", "kernforge_version", "git", "device", "driver", "compiler",
                "date", "host", "python", "numpy"):
        assert key in prov
    assert prov["compiler"] and prov["device"] and prov["command"][0] == "kernforge"
    assert set(prov["git"]) == {"revision", "dirty"}


def test_figure_round_trip_and_regeneration(tmp_path: Path) -> None:
    script = tmp_path / "make.py"
    out = tmp_path / "fig.json"
    script.write_text(
        "import sys\nfrom kernforge.harness.provenance import write_figure\n"
        f"write_figure({str(out)!r}, {{'speedup': 2.0}}, {{'samples': [1, 2]}}, "
        "{'command': [sys.argv[0]], 'cwd': " + repr(str(tmp_path)) + ", 'date': 'now'})\n")
    write_figure(out, {"speedup": 1.0}, {}, {"command": [str(script)], "cwd": str(tmp_path)})
    assert read_figure(out)["figure"]["speedup"] == 1.0
    proc = regenerate(out, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert read_figure(out)["figure"]["speedup"] == 2.0 and read_figure(out)["raw"]


def test_unreadable_figures_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a kernforge figure"):
        read_figure(tmp_path / "x.json")
    write_figure(tmp_path / "y.json", {}, {}, {"command": []})
    with pytest.raises(ConfigError, match="no command"):
        regenerate(tmp_path / "y.json")


def test_idle_check() -> None:
    cpu = idle_check(get_backend("cpu"))
    if sys.platform.startswith("linux"):
        assert cpu.idle in (True, False) and 0.0 <= (cpu.utilisation or 0.0) <= 1.0
    null = idle_check(get_backend("null"))
    assert null.idle is None and "no idle probe" in null.note
