"""nvidia-smi's GPU state line, parsed; None without nvidia-smi (the bench records both)."""

from __future__ import annotations

import shutil

import pytest

from kernforge.forge.gpustate import gpu_state, parse_query


def test_a_query_line_is_parsed() -> None:
    got = parse_query("1980, 3201, 41, 118.52, 0x0000000000000000\n")
    assert got == {"sm_mhz": 1980.0, "mem_mhz": 3201.0, "temperature_c": 41.0,
                   "power_w": 118.52, "throttle_reasons": "0x0000000000000000"}
    assert parse_query("1980, [N/A], 41, 118.52, 0x4")["mem_mhz"] is None
    assert parse_query("") is None and parse_query("1, 2, 3") is None


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_no_nvidia_smi_means_no_state() -> None:
    assert gpu_state() is None
