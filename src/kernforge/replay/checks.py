"""The dynamic integrity gates of a replay: repeated verification, poisoned outputs, fresh
random inputs, and the roofline on the candidate's own timing. See docs/integrity.md.

Each gate raises :class:`~kernforge.harness.integrity.IntegrityError` (Status + reason code +
the failing buffer checks) or returns a note for the report. The differential gates run the
*recorded* kernel (the reference, compiled with its recorded options on the same backend) on
the same state as the candidate; the reference's buffers are scrubbed with poison before the
candidate runs again, so no reference result stays in memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends import Backend
from ..core import BufferCheck, KernelSource, Recording, Status, Variant
from ..harness import check_buffer, round_robin, verify
from ..harness.integrity import IntegrityError
from ..harness.poison import fresh_state, is_fresh, poison_like, poisoned_elements, same_bits
from ..harness.roofline import (
    DEFAULT_SLACK,
    RooflineCheck,
    copy_bandwidth,
    must_move_bytes,
    roofline_check,
)
from ..harness.static_checks import RULES, Finding, check_defines, check_options, new_findings
from .prepare import Prepared, is_tolerant, prepare, resolve_policies
from .sanitize import sanitizer_gate


@dataclass(frozen=True)
class Integrity:
    """Which integrity gates a replay runs (``replay(..., integrity=Integrity())``).

    ``seed`` None draws a fresh seed per replay (reported in the notes), so a candidate cannot
    be prepared for the "fresh" inputs. ``sanitize``: the sanitizer gate (:mod:`.sanitize`),
    run once before the dynamic gates; validation runs it, a strict replay does not."""

    static: bool = True
    sanitize: bool = True
    verify_runs: int = 5
    poison: bool = True
    fresh_trials: int = 2
    seed: int | None = None
    roofline: bool = True
    slack: float = DEFAULT_SLACK

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Report:
    """What the gates found for a candidate that passed them."""

    prepared: Prepared
    checks: tuple[BufferCheck, ...]
    notes: dict[str, Any] = field(default_factory=dict)
    reference: Prepared | None = None


def _bad(checks: tuple[BufferCheck, ...]) -> str:
    return "; ".join(c.describe() for c in checks if not c.passed)


# ---- static ---------------------------------------------------------------------------------
def static_gate(recording: Recording, variant: Variant, bitwise: bool) -> list[Finding]:
    """Raise INVALID_CONFIG with ``static:<rule>`` for the first new finding in the candidate's
    source or options; return [] when there is none."""
    source: KernelSource = variant.source
    found = new_findings(source, recording.source, bitwise=bitwise)
    found += check_options(variant.options.as_dict(), recording.options.as_dict(),
                           bitwise=bitwise)
    found += check_defines(variant.defines, recording.defines, bitwise=bitwise)
    if found:
        first = min(found, key=lambda f: (RULES.index(f.rule), f.line))
        listing = "; ".join(f.describe() for f in found[:6])
        raise IntegrityError(
            f"{recording.name}: the candidate source is refused ({len(found)} finding(s)): "
            f"{listing}", reason=first.reason, status=Status.INVALID_CONFIG,
            hint="remove the construct; see docs/integrity.md for what candidates may not do")
    return found


# ---- repeated verification ------------------------------------------------------------------
def verify_gate(prepared: Prepared, runs: int) -> tuple[BufferCheck, ...]:
    """Run ``runs`` times from the recorded prologue, verifying each run. Fails with
    ``verify:nondeterministic`` when the runs' outputs differ from one another (a race, or a
    result that depends on how often the kernel was called), else ``verify:recorded``."""
    results: list[tuple[tuple[BufferCheck, ...], tuple[tuple[int, int], ...]]] = []
    for _ in range(max(1, runs)):
        prepared.restore()
        prepared.run_once()
        results.append((prepared.verify(), prepared.fingerprint()))
    if all(c.passed for checks, _ in results for c in checks):
        return results[0][0]
    failing = next(checks for checks, _ in results if any(not c.passed for c in checks))
    varied = len({fp for _, fp in results}) > 1
    name = prepared.recording.name
    if varied:
        npass = sum(all(c.passed for c in checks) for checks, _ in results)
        raise IntegrityError(
            f"{name}: {len(results)} runs from the same prologue gave different outputs "
            f"({npass} verified): {_bad(failing)}", reason="verify:nondeterministic",
            checks=failing, hint="a race, or results that depend on earlier calls")
    raise IntegrityError(f"{name} fails verification: {_bad(failing)}",
                         reason="verify:recorded", checks=failing)


# ---- differential gates ---------------------------------------------------------------------
def output_names(recording: Recording, reference: Prepared) -> list[str]:
    """Arrays the kernel may write: written in the recording, or non-const pointers of the
    recorded kernel's signature (an output whose prologue already held the answer)."""
    writable = {p.name for p in reference.compiled.signature if p.pointer and not p.const}
    return [a.name for a in recording.args if a.is_array and (a.written or a.name in writable)]


def _run(p: Prepared, state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    p.load(state)
    p.run_once()
    return p.read_back()


def poison_gate(prepared: Prepared, reference: Prepared) -> str:
    """Outputs poisoned, inputs as recorded. The elements the *recorded* kernel then still
    computes bit-identically to the epilogue are the ones it overwrites without reading; the
    candidate must produce them too (within the policy). Fails with ``poison:unwritten`` when
    such elements still hold the poison, ``poison:stale-read`` when they differ otherwise."""
    rec = prepared.recording
    targets = output_names(rec, reference)
    state = {n: rec.prologue(n) for n in prepared.buffers}
    state.update({n: poison_like(state[n]) for n in targets})
    ref_out = _run(reference, state)
    reference.scrub()
    masks = {n: same_bits(ref_out[n], rec.expected(n)) for n in targets}
    covered = sum(int(m.sum()) for m in masks.values())
    if covered == 0:
        prepared.restore()
        return "vacuous: every output element depends on its prior contents"
    out = _run(prepared, state)
    prepared.restore()
    failed: list[BufferCheck] = []
    left = 0
    for n, mask in masks.items():
        got = np.ascontiguousarray(out[n]).reshape(-1)[mask]
        ref = np.ascontiguousarray(rec.expected(n)).reshape(-1)[mask]
        check = check_buffer(n, got, ref, prepared.policies[n])
        if not check.passed:
            failed.append(check)
            left += int(poisoned_elements(got).sum())
    if failed:
        what = (f"{left} element(s) the recorded kernel overwrites still hold the poison"
                if left else "outputs depend on the prior contents of output memory, which "
                             "the recorded kernel overwrites without reading")
        raise IntegrityError(f"{rec.name}: with poisoned outputs, {what}: {_bad(tuple(failed))}",
                             reason="poison:unwritten" if left else "poison:stale-read",
                             checks=failed, hint="write every output element on every call")
    return f"{covered} output element(s) checked from poison"


def _same(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return all(bool(same_bits(a[n], b[n]).all()) for n in a)


def fresh_gate(prepared: Prepared, reference: Prepared, trials: int, seed: int) -> str:
    """``trials`` fresh random states (floating-point arrays redrawn, see
    :mod:`kernforge.harness.poison`); on each the candidate must match the recorded kernel
    under the buffer policies. Fails with ``fresh:mismatch``."""
    rec = prepared.recording
    prologues = {n: rec.prologue(n) for n in prepared.buffers}
    if not any(is_fresh(a) for a in prologues.values()):
        return "skipped: no floating-point arrays to redraw"
    for trial in range(trials):
        state = fresh_state(prologues, seed + trial)
        ref = _run(reference, state)
        if trial == 0 and not _same(ref, _run(reference, state)):
            reference.scrub()
            prepared.restore()
            return "skipped: the recorded kernel is not deterministic on fresh inputs"
        reference.scrub()
        out = _run(prepared, state)
        checks = verify(out, ref, prepared.policies)
        if any(not c.passed for c in checks):
            prepared.restore()
            raise IntegrityError(
                f"{rec.name}: on fresh random inputs (seed {seed + trial}) the candidate "
                f"differs from the recorded kernel: {_bad(checks)}", reason="fresh:mismatch",
                checks=checks, hint="the candidate is specialized to the recorded data")
    prepared.restore()
    return f"{trials} fresh state(s) matched (seeds {seed}..{seed + trials - 1})"


# ---- running them ---------------------------------------------------------------------------
def run_checks(recording: Recording, backend: Backend, variant: Variant,
               tolerance: Any, integrity: Integrity) -> Report:
    """Static gate, compile, sanitizers, repeated verification, poisoned outputs, fresh
    inputs."""
    notes: dict[str, Any] = {}
    if integrity.static:
        bitwise = not is_tolerant(recording, resolve_policies(recording, tolerance))
        static_gate(recording, variant, bitwise)
        notes["static"] = "no findings"
    prepared = prepare(recording, backend=backend, variant=variant, tolerance=tolerance)
    if integrity.sanitize:  # first: a race is caught by the tool, not by repetition
        notes["sanitize"] = sanitizer_gate(recording, prepared)
    checks = verify_gate(prepared, integrity.verify_runs)
    notes["verify"] = f"{max(1, integrity.verify_runs)} run(s) verified"
    reference = None
    if integrity.poison or integrity.fresh_trials:
        reference = prepare(recording, backend=backend, tolerance=tolerance)
    if integrity.poison and reference is not None:
        notes["poison"] = poison_gate(prepared, reference)
    if integrity.fresh_trials and reference is not None:
        seed = integrity.seed if integrity.seed is not None else \
            int.from_bytes(os.urandom(4), "little")
        notes["fresh"] = fresh_gate(prepared, reference, integrity.fresh_trials, seed)
    return Report(prepared, checks, notes, reference)


def _read_only(recording: Recording) -> dict[str, bool]:
    """Per array: declared read-only (``const``) by the signature; True where the signature
    is not known (the recording cannot tell: counted as read, the bound calibrated)."""
    sig = recording.source.signature
    if not sig:
        return {}
    return {p.name: p.const for p in sig if p.pointer}


def bytes_to_move(recording: Recording) -> int:
    """The bytes the launch must touch: changed output elements, and read-only inputs."""
    const = _read_only(recording)
    return must_move_bytes([(recording.prologue(a.name), recording.expected(a.name), a.written,
                             const.get(a.name, True)) for a in recording.args if a.is_array])


def roofline_gate(recording: Recording, backend: Backend, candidate_s: float,
                  original_s: float | None, slack: float,
                  retime: Callable[[], float] | None = None, flush: bool = True
                  ) -> RooflineCheck:
    """Refuse a time below the copy-bandwidth bound (``roofline:exceeded``), calibrated by
    the recorded kernel's time ``original_s`` from the same interleaved run. Without it, a
    candidate below the bound is timed again interleaved with the recorded kernel
    (``retime``: the candidate's timed run, when the caller has one) and judged on that run
    (the candidate's median against the recorded kernel's fastest run), never on a time taken
    at another moment; the recorded kernel in the cache state ``flush`` that ``retime``
    measures the candidate in."""
    moved = bytes_to_move(recording)
    bw = copy_bandwidth(backend, moved)
    check = roofline_check(moved, bw, candidate_s, original_s, slack=slack)
    if check.refused and original_s is None and retime is not None:
        ref = prepare(recording, backend=backend)
        ref.measure(warmup=1, repeat=0, flush=flush)
        samples = round_robin([lambda: ref.measure(warmup=0, repeat=1, flush=flush)[0],
                               retime], passes=5)
        # the recorded kernel's fastest run: a load only ever slows a run, and a bound
        # calibrated by a slowed run would refuse an honest candidate (a cheat stays fast)
        check = roofline_check(moved, bw, float(np.median(samples[1])),
                               float(np.min(samples[0])), slack=slack)
    if check.refused:
        raise IntegrityError(f"{recording.name}: the measured time is impossible: {check.note}",
                             reason="roofline:exceeded",
                             hint="work escaped the timed region, or the timing is wrong")
    return check
