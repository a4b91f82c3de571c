"""A recording made ready to run: backend resolved, variant compiled, prologue on the device.

:class:`Prepared` holds one compiled module and the device buffers it runs on; the replay engine
verifies and times that same module. The expected outputs never sit in memory the candidate can
address: on backends that fingerprint buffers where they live (the GPU), only a 64-bit
fingerprint of each expected buffer is kept, the output's fingerprint is computed on the device
after the run, and a buffer whose fingerprint differs is read back and checked in full on the
host (measuring its error). Elsewhere every buffer is read back and checked on the host.

Restores copy from *pristine* buffers (device-resident copies of the prologue), so on the GPU a
restore is a device-to-device copy. The first run restores every array; timed runs restore the
buffers the recorded launch wrote (a variant that verified did not change its inputs).

The integrity checks (:mod:`.checks`) also load other states (poisoned outputs, fresh random
inputs) with :meth:`Prepared.load`, and scrub buffers that held a reference kernel's results
(:meth:`Prepared.scrub`) so that no result is left in memory a candidate could later reach.

A long-lived caller (a replay service worker) may keep one :class:`Prepared` per recording and
bind each new compiled variant to its device state (:meth:`Prepared.with_compiled`, or
``prepare(..., reuse=state)``): buffers, pristine copies and expected fingerprints are shared,
not rebuilt. That is sound because every evaluation restores from the pristine copies before
each run and verifies every output afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..backends import Backend, Compiled, get_backend
from ..backends.fingerprint import host_fingerprint
from ..core import (
    ArgumentError,
    BufferCheck,
    ConfigError,
    LaunchConfig,
    Recording,
    Tolerance,
    Variant,
)
from ..harness import check_buffer, measure, verify
from ..harness.poison import poison_array, poison_like

TolerancePolicy = Tolerance | Mapping[str, Tolerance | str] | None


def resolve_policies(recording: Recording, tolerance: TolerancePolicy = None
                     ) -> dict[str, Tolerance]:
    """The correctness policy of every array argument.

    The recording's per-argument policy, unless ``tolerance`` overrides it: a single
    :class:`Tolerance` applies to every *written* buffer (unwritten inputs stay as recorded,
    bitwise by default); a mapping overrides the buffers it names (a string is parsed with
    :meth:`Tolerance.parse`). Naming a buffer the recording does not have is a ConfigError.
    """
    policies = {a.name: a.policy for a in recording.args if a.is_array}
    if isinstance(tolerance, Tolerance):
        for a in recording.args:
            if a.is_array and a.written:
                policies[a.name] = tolerance
    elif tolerance is not None:
        for name, tol in tolerance.items():
            if name not in policies:
                raise ConfigError(
                    f"tolerance given for {name!r}, which is not an array argument of "
                    f"recording {recording.name}",
                    hint=f"array arguments are: {', '.join(policies) or '(none)'}")
            policies[name] = tol if isinstance(tol, Tolerance) else Tolerance.parse(tol)
    return policies


def is_tolerant(recording: Recording, policies: Mapping[str, Tolerance]) -> bool:
    """True iff there are written buffers and every one of them declares a tolerance."""
    written = [a.name for a in recording.args if a.is_array and a.written]
    return bool(written) and all(not policies[n].exact for n in written)


def bind_args(recording: Recording, compiled: Compiled, buffers: Mapping[str, Any]) -> list[Any]:
    """Arguments in the compiled kernel's parameter order: buffers for arrays, recorded values
    for scalars. Parameters are matched by name; when the names differ but the source is the
    recorded one, by position. Otherwise the candidate changed the signature: ArgumentError.
    """
    recorded = list(recording.args)
    names = [p.name for p in compiled.signature]
    by_name = {a.name: a for a in recorded}
    if sorted(names) == sorted(by_name):
        order = [by_name[n] for n in names]
    elif len(names) == len(recorded) and compiled.variant.source == recording.source:
        order = recorded
    else:
        raise ArgumentError(
            f"the kernel's parameters ({', '.join(names)}) do not match the recorded arguments "
            f"({', '.join(by_name)})",
            hint="a candidate must keep the recorded kernel's parameter names and kinds")
    return [buffers[a.name] if a.is_array else a.value for a in order]


@dataclass
class Prepared:
    """One compiled variant and its device state, ready to restore, run, verify and time."""

    recording: Recording
    backend: Backend
    compiled: Compiled
    policies: dict[str, Tolerance]
    buffers: dict[str, Any]
    args: list[Any]
    compile_s: float
    pristine: dict[str, Any] = field(repr=False)
    written: tuple[str, ...] = ()
    expected_fp: dict[str, tuple[int, int]] | None = None
    _expected: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def launch(self) -> LaunchConfig:
        return self.compiled.variant.launch

    @property
    def nbytes(self) -> int:
        """Bytes held in the backend's memory: the buffers and their pristine copies."""
        return sum(int(b.nbytes) for b in (*self.buffers.values(), *self.pristine.values()))

    def with_compiled(self, compiled: Compiled, *, policies: Mapping[str, Tolerance] | None
                      = None, compile_s: float = 0.0) -> Prepared:
        """The same device state bound to another compiled variant of this recording.

        Buffers, pristine copies and expected fingerprints are shared, not copied; the
        arguments are bound again (ArgumentError when the candidate changed the signature) and
        ``policies`` (default: these) apply to the new one. The caller restores before the first
        run, as the engine always does; two Prepared sharing a state must not run concurrently.
        """
        return replace(self, compiled=compiled, compile_s=compile_s,
                       policies=dict(self.policies if policies is None else policies),
                       args=bind_args(self.recording, compiled, self.buffers))

    def restore(self, *, all_buffers: bool = True) -> None:
        """Copy the recorded prologue back (every array, or only the written ones)."""
        for name in (self.buffers if all_buffers else self.written):
            self.backend.restore(self.buffers[name], self.pristine[name])

    def restore_written(self) -> None:
        self.restore(all_buffers=False)

    def run_once(self) -> None:
        """Launch once and wait for it (the caller restores first)."""
        self.backend.launch(self.compiled, self.args, self.launch)
        self.backend.synchronize()

    def read_back(self) -> dict[str, np.ndarray]:
        return {name: self.backend.to_host(buf) for name, buf in self.buffers.items()}

    def load(self, state: Mapping[str, np.ndarray]) -> None:
        """Overwrite the named buffers with host arrays (another state than the prologue)."""
        for name, array in state.items():
            self.backend.restore(self.buffers[name], np.ascontiguousarray(array))

    def scrub(self) -> None:
        """Fill every buffer with poison, so no result stays where a later kernel could read
        it (run on a reference kernel's buffers before they are dropped)."""
        for buf in self.buffers.values():
            self.backend.restore(buf, poison_array(tuple(buf.shape), buf.dtype))
        self.backend.synchronize()

    def fingerprint(self) -> tuple[tuple[int, int], ...]:
        """Content fingerprints of every buffer (computed where the buffers live)."""
        got = self._device_fingerprints()
        if got is None:
            got = [host_fingerprint(a) for a in self.read_back().values()]
        return tuple(got)

    def _device_fingerprints(self) -> list[tuple[int, int]] | None:
        """One fingerprint per buffer from the backend, or None (verify on the host) when it
        computes none or not exactly one per buffer: never fewer checks than buffers."""
        got = self.backend.fingerprints(list(self.buffers.values()))
        if got is None or len(got) != len(self.buffers):
            return None
        return list(got)

    def expected(self) -> dict[str, np.ndarray]:
        """Every array's contents after the recorded launch (loaded once)."""
        if not self._expected:
            self._expected = {n: self.recording.expected(n) for n in self.buffers}
        return self._expected

    def verify(self) -> tuple[BufferCheck, ...]:
        """Check every array buffer now on the device against the recording."""
        got = self._device_fingerprints() if self.expected_fp is not None else None
        if self.expected_fp is None or got is None:
            return verify(self.read_back(), self.expected(), self.policies)
        checks = []
        for (name, buf), fp in zip(self.buffers.items(), got, strict=True):
            policy = self.policies[name]
            if fp == self.expected_fp[name]:  # bit-identical
                checks.append(BufferCheck(name, True, policy.mode, int(buf.size)))
            else:
                checks.append(check_buffer(name, self.backend.to_host(buf),
                                           self.recording.expected(name), policy))
        return tuple(checks)

    def measure(self, *, warmup: int = 3, repeat: int = 10, flush: bool = True) -> list[float]:
        """The timing protocol on this compiled module, restoring before every run."""
        return measure(self.backend, self.compiled, self.args, self.launch,
                       self.restore_written, warmup=warmup, repeat=repeat, flush=flush)


def check_reusable(reuse: Prepared, recording: Recording, backend: Backend) -> None:
    """Raise ConfigError unless ``reuse`` holds ``recording`` on ``backend`` (a caller's
    mistake, never a candidate's)."""
    if reuse.backend is not backend or (reuse.recording is not recording
                                        and reuse.recording != recording):
        raise ConfigError(
            f"the prepared state given for reuse holds {reuse.recording.name} on "
            f"{reuse.backend.name}, not {recording.name} on {backend.name}",
            hint="reuse a state prepared from the same recording and backend object")


def prepare(recording: Recording, *, backend: Backend | str | None = None,
            variant: Variant | None = None, tolerance: TolerancePolicy = None,
            reuse: Prepared | None = None) -> Prepared:
    """Compile ``variant`` (default: the recorded one) and put the prologue on the device.

    The backend is ``recording.backend`` unless given. Options that may change results
    bit-for-bit are allowed only when every written buffer's policy is a tolerance. Raises the
    backend's typed errors (CompileError, ConfigError, ...) unchanged. With ``reuse`` (a state
    prepared earlier from this recording on this backend) nothing is uploaded: the compiled
    variant is bound to that state (:meth:`Prepared.with_compiled`).
    """
    be = get_backend(backend if backend is not None else recording.backend)
    policies = resolve_policies(recording, tolerance)
    if reuse is not None:
        check_reusable(reuse, recording, be)
    t0 = time.perf_counter()
    compiled = be.compile(variant or recording.variant,
                          tolerant=is_tolerant(recording, policies), recorded=recording.options)
    compile_s = time.perf_counter() - t0
    if reuse is not None:
        return reuse.with_compiled(compiled, policies=policies, compile_s=compile_s)
    arrays = [a for a in recording.args if a.is_array]
    pristine = {a.name: be.to_device(np.ascontiguousarray(recording.prologue(a.name)))
                for a in arrays}
    buffers = {name: be.to_device(recording.prologue(name)) for name in pristine}
    args = bind_args(recording, compiled, buffers)
    written = tuple(a.name for a in arrays if a.written)
    return Prepared(recording, be, compiled, policies, buffers, args, compile_s, pristine,
                    written, _expected_fingerprints(be, recording, pristine))


def _expected_fingerprints(be: Backend, recording: Recording, pristine: Mapping[str, Any]
                           ) -> dict[str, tuple[int, int]] | None:
    """Fingerprints of the expected contents, where the backend computes them on the device.
    An expected buffer is uploaded only for this and freed: the candidate never sees it."""
    if be.fingerprints([]) is None:
        return None
    out: dict[str, tuple[int, int]] = {}
    for a in recording.args:
        if not a.is_array:
            continue
        if a.written:
            expected = np.ascontiguousarray(recording.expected(a.name))
            tmp = be.to_device(expected)
            got = be.fingerprints([tmp])
            be.restore(tmp, poison_like(expected))  # freed memory must not hold the answer
            be.synchronize()
            del tmp
        else:
            got = be.fingerprints([pristine[a.name]])
        if got is None or len(got) != 1:
            return None  # not one fingerprint per buffer: verify every buffer on the host
        out[a.name] = got[0]
    return out
