"""The red-team suite on the CPU backend: every cheat rejected with the right reason.

With static checks on (the default) each cheat must get exactly its (Status, reason); with them
off, the dynamic gates must still catch every cheat that is safe to run in-process.
"""

from __future__ import annotations

import pytest

from kernforge.core import Status
from kernforge.testing.redteam import record_bases, run_cheat, table
from kernforge.testing.redteam_c import BASES, CHEATS


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory):
    return record_bases(tmp_path_factory.mktemp("redteam"), BASES, "cpu")


def test_the_suite_has_at_least_twelve_distinct_cheats() -> None:
    assert len({c.name for c in CHEATS}) == len(CHEATS) >= 12
    assert {c.base for c in CHEATS} <= {b.name for b in BASES}


# the default run catches every reason once; these give a reason another cheat gives too
SAME_REASON = {"stale_output_read", "half_grid", "recorded_zero_shortcut"}


@pytest.mark.parametrize("cheat", [
    pytest.param(c, marks=pytest.mark.slow) if c.name in SAME_REASON else c for c in CHEATS],
    ids=[c.name for c in CHEATS])
def test_cheat_is_rejected_with_the_right_reason(cheat, recordings) -> None:
    row = run_cheat(cheat, recordings)
    if row.verdict == "inconclusive":  # a speed-only cheat on a busy machine: not accepted
        assert cheat.status is Status.OK and row.caught, row.message
        return
    assert row.verdict == "rejected", row.message
    assert (row.status, row.reason) in {(cheat.status, r) for r in cheat.reasons}, row.message
    assert row.caught and table([row]).count("| yes |") == 1


def test_an_inconclusive_speed_only_cheat_counts_as_caught_and_a_wrong_one_does_not() -> None:
    from kernforge.testing.redteam import Outcome

    speed_only = next(c for c in CHEATS if c.status is Status.OK)
    wrong = next(c for c in CHEATS if c.status is Status.WRONG_RESULT)
    assert Outcome(speed_only, Status.OK, "measure:inconclusive", "inconclusive", "").caught
    assert not Outcome(wrong, Status.OK, "measure:inconclusive", "inconclusive", "").caught
    assert not Outcome(speed_only, Status.OK, "", "accepted", "").caught


DYNAMIC = [c for c in CHEATS if c.dynamic is not None]


# defence in depth: every cheat is rejected by default above; each dynamic gate alone:
# test_gates.py and test_poison_fresh.py
@pytest.mark.slow
@pytest.mark.parametrize("cheat", DYNAMIC, ids=[c.name for c in DYNAMIC])
def test_without_static_checks_the_dynamic_gates_catch_it(cheat, recordings) -> None:
    row = run_cheat(cheat, recordings, static=False)
    if row.verdict == "inconclusive":  # a speed-only cheat on a busy machine: not accepted
        assert cheat.status is Status.OK and row.caught, row.message
        return
    assert row.verdict == "rejected", row.message
    assert row.reason in (cheat.dynamic, *cheat.dynamic_also), row.message
