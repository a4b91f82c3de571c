"""Recorded launches of one kernel that tuned to different winners get one shared winner where
it verifies and passes the gate on each of them (fake driver, no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.harness.verdict import Judgement
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native_share import share_winners
from kernforge.replay.native_tune import tune_native
from kernforge.testing.fakedriver import FakeCuda


@pytest.mark.slow
def test_the_surest_winner_is_shared(on_fake_nvrtc: FakeCuda, tmp_path: Path) -> None:
    status, units, problems, _ = record_command(on_fake_nvrtc.nvrtc_command(3, 1000, "vary"),
                                                tmp_path / "r", max_instances=2)
    assert status == 0 and not problems and len(units) == 2
    done = [tune_native(u, read_native(u), repeat=3, passes=5,
                        defines=[[("KF_REPS", "1")]]) for u in units]
    assert all(t.win for t in done), [t.refused for t in done]
    lead, other = done
    # the second launch "won" with a block shape alone, by a smaller margin
    geo = next(i for i, (v, m) in enumerate(zip(other.variants, other.results))
               if i > 0 and v.block is not None and v.build is None and m.ok)
    other.best, other.ci = geo, (1.0, 1.01)
    assert lead.ci is not None and lead.ci[0] > 1.01
    said: list[str] = []
    assert share_winners(done, passes=5, repeat=3, say=said.append) == 1
    assert other.variants[other.best] == lead.variants[lead.best]
    assert other.win and other.ci is not None and other.ci[0] > 1.02
    assert "shared winner" in other.notes[-1] and "takes" in said[0]
    # nothing left to share: a second call changes nothing
    assert share_winners(done, passes=5, repeat=3) == 0


@pytest.mark.slow
def test_a_winner_the_gate_refuses_on_another_launch_is_not_shared(on_fake_nvrtc: FakeCuda,
                                                                    tmp_path: Path) -> None:
    _, units, _, _ = record_command(on_fake_nvrtc.nvrtc_command(3, 1000, "vary"),
                                    tmp_path / "r", max_instances=2)
    done = [tune_native(u, read_native(u), repeat=3, passes=5,
                        defines=[[("KF_REPS", "1")]]) for u in units]
    assert all(t.win for t in done), [t.refused for t in done]
    other = done[1]
    geo = next(i for i, (v, m) in enumerate(zip(other.variants, other.results))
               if i > 0 and v.block is not None and v.build is None and m.ok)
    other.best, other.ci = geo, (1.0, 1.01)
    calls: list[float] = []

    def refuse_all(speed: Judgement) -> str | None:
        assert speed.speedup is not None
        calls.append(speed.speedup)
        return "refused"

    assert share_winners(done, refuse=refuse_all, passes=5, repeat=3) == 0
    assert calls and other.best == geo and not other.notes  # compared, refused, kept its own
