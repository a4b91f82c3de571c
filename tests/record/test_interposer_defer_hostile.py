"""Temporal fusion in the interposer against what a program may do around its held steps, on
the fake CUDA driver: a fork while steps are held (the child's exit must not run the parent's
launches). The loop's buffers are a shared file mapping (host-mapped memory: what a kernel
leaves there is seen by every process mapping it), so a launch run twice shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_run import fused_groups, run, step_line, tuned_image

from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

STEPS = "b" * 13  # T=5: two groups fused, three whole steps held


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return interposer.build(tmp_path_factory.mktemp("interposer"))


def both(fake: FakeCuda, lib: Path, tmp: Path, script: str) -> dict[str, tuple[str, bytes]]:
    """``script`` plain and under the fused deployment of the step: (output, the mapping)."""
    got = {}
    lines = step_line(tuned_image(fake, tmp), 5) + "\n"
    for mode in ("plain", "fused"):
        mapped = tmp / f"{mode}.bin"
        env = {"FAKE_LOOP_MAP": str(mapped)}
        r = run(fake, lib, fake.loop_command(script), tmp, lines if mode == "fused" else None,
                env=env, preload=[lib] if mode == "fused" else [])
        assert r.rc == 0 and not r.messages, (mode, r.err)
        assert mode == "plain" or fused_groups(r) >= 2, r.log
        got[mode] = (r.out, mapped.read_bytes())
    return got


@pytest.mark.parametrize("script", [STEPS + "F" + STEPS + "c", STEPS + "iF" + "j" + STEPS + "c",
                                    STEPS + "F" + "F" + "c"],
                         ids=["between steps", "mid-step", "twice"])
def test_a_fork_with_steps_held_runs_each_launch_once(fake: FakeCuda, lib: Path,
                                                      tmp_path: Path, script: str) -> None:
    got = both(fake, lib, tmp_path, script)
    assert got["fused"] == got["plain"]
