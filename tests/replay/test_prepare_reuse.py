"""One prepared device state reused by many variants (``prepare(reuse=)``,
``Prepared.with_compiled``, ``evaluate_variant(state=)``): nothing uploaded again, and every
evaluation still restores before it runs and verifies every output (CPU backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import get_backend
from kernforge.core import ConfigError, Recording, Status, Variant
from kernforge.record import load_recording
from kernforge.replay import evaluate_variant, prepare
from kernforge.replay.prepare import Prepared
from kernforge.service.samples import fault, good_variants, record_sample

PROTOCOL = {"warmup": 1, "repeat": 2}
LAZY = """
void smooth(const double *restrict x, double *restrict y, long n) {
    (void)x; (void)y; (void)n;
}
"""
SCRIBBLE = """
void smooth(double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++)
        y[i] = 0.25 * (i > 0 ? x[i - 1] : 0.0) + 0.5 * x[i]
             + 0.25 * (i + 1 < n ? x[i + 1] : 0.0);
    x[0] = -1.0;
}
"""
RENAMED = """
void smooth(const double *restrict a, double *restrict b, long n) {
    for (long i = 0; i < n; i++) b[i] = a[i];
}
"""


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    return load_recording(record_sample(tmp_path_factory.mktemp("reuse"), n=1 << 10))


@pytest.fixture
def base(rec: Recording) -> Prepared:
    return prepare(rec, backend=get_backend(rec.backend))


def _code(rec: Recording, code: str) -> Variant:
    return rec.variant.with_(source=rec.source.with_code(code))


def _run(rec: Recording, base: Prepared, variant: Variant) -> Status:
    return evaluate_variant(rec, variant, backend=base.backend, state=base, **PROTOCOL).status


def test_with_compiled_shares_the_device_state(rec: Recording, base: Prepared) -> None:
    o3 = good_variants(rec, 2)[1]
    other = prepare(rec, backend=base.backend, variant=o3, reuse=base)
    assert other.compiled.variant.options != base.compiled.variant.options
    assert other.buffers is base.buffers and other.pristine is base.pristine
    assert other.expected_fp is base.expected_fp
    assert all(a is b for a, b in zip(other.args, base.args) if isinstance(a, np.ndarray))
    assert base.nbytes == 2 * 2 * (1 << 10) * 8  # x and y, each with its pristine copy


def test_verification_stays_honest_on_a_reused_state(rec: Recording, base: Prepared) -> None:
    good, wrong = rec.variant, fault(rec, "wrong")
    # a correct run leaves correct results in the buffers: a candidate that writes nothing
    # must still fail (the buffers are restored before it runs)
    assert _run(rec, base, good) is Status.OK
    assert _run(rec, base, _code(rec, LAZY)) is Status.WRONG_RESULT
    assert _run(rec, base, good) is Status.OK
    assert _run(rec, base, wrong) is Status.WRONG_RESULT
    assert _run(rec, base, good_variants(rec, 2)[1]) is Status.OK
    # a candidate that changes an input fails, and the next one starts from the prologue
    assert _run(rec, base, _code(rec, SCRIBBLE)) is Status.WRONG_RESULT
    assert _run(rec, base, good) is Status.OK
    assert np.array_equal(base.backend.to_host(base.pristine["x"]), rec.prologue("x"))


def test_a_changed_signature_is_the_candidates_failure(rec: Recording, base: Prepared) -> None:
    m = evaluate_variant(rec, _code(rec, RENAMED), backend=base.backend, state=base,
                         **PROTOCOL)
    assert m.status is Status.INVALID_CONFIG and "parameters" in m.message
    assert _run(rec, base, rec.variant) is Status.OK


def test_a_state_of_another_recording_is_refused(rec: Recording, base: Prepared,
                                                 tmp_path: Path) -> None:
    other = load_recording(record_sample(tmp_path, n=1 << 9))
    with pytest.raises(ConfigError, match="prepared state"):
        evaluate_variant(other, other.variant, backend=base.backend, state=base)
    with pytest.raises(ConfigError, match="prepared state"):
        prepare(other, backend=base.backend, reuse=base)
