"""A recording made ready to run: backend resolved, variant compiled, prologue on the device.

:class:`Prepared` holds one compiled module and the device buffers it runs on; the replay engine
verifies and times that same module. The expected outputs stay on the host side and are only
read after the kernel finished (the candidate never sees them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends import Backend, Compiled, get_backend
from ..core import (
    ArgumentError,
    BufferCheck,
    ConfigError,
    LaunchConfig,
    Recording,
    Tolerance,
    Variant,
)
from ..harness import measure, verify

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
    prologue: dict[str, np.ndarray] = field(repr=False)
    _expected: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def launch(self) -> LaunchConfig:
        return self.compiled.variant.launch

    def restore(self) -> None:
        """Copy the recorded prologue back into every array buffer."""
        for name, buf in self.buffers.items():
            self.backend.restore(buf, self.prologue[name])

    def run_once(self) -> None:
        """Launch once and wait for it (the caller restores first)."""
        self.backend.launch(self.compiled, self.args, self.launch)
        self.backend.synchronize()

    def read_back(self) -> dict[str, np.ndarray]:
        return {name: self.backend.to_host(buf) for name, buf in self.buffers.items()}

    def expected(self) -> dict[str, np.ndarray]:
        """Every array's contents after the recorded launch (loaded once)."""
        if not self._expected:
            self._expected = {n: self.recording.expected(n) for n in self.buffers}
        return self._expected

    def verify(self) -> tuple[BufferCheck, ...]:
        """Check every array buffer now on the device against the recording."""
        return verify(self.read_back(), self.expected(), self.policies)

    def measure(self, *, warmup: int = 3, repeat: int = 10, flush: bool = True) -> list[float]:
        """The timing protocol on this compiled module, restoring before every run."""
        return measure(self.backend, self.compiled, self.args, self.launch, self.restore,
                       warmup=warmup, repeat=repeat, flush=flush)


def prepare(recording: Recording, *, backend: Backend | str | None = None,
            variant: Variant | None = None, tolerance: TolerancePolicy = None) -> Prepared:
    """Compile ``variant`` (default: the recorded one) and put the prologue on the device.

    The backend is ``recording.backend`` unless given. Options that may change results
    bit-for-bit are allowed only when every written buffer's policy is a tolerance. Raises the
    backend's typed errors (CompileError, ConfigError, ...) unchanged.
    """
    be = get_backend(backend if backend is not None else recording.backend)
    policies = resolve_policies(recording, tolerance)
    t0 = time.perf_counter()
    compiled = be.compile(variant or recording.variant,
                          tolerant=is_tolerant(recording, policies))
    compile_s = time.perf_counter() - t0
    prologue = {a.name: np.ascontiguousarray(recording.prologue(a.name))
                for a in recording.args if a.is_array}
    buffers = {name: be.to_device(arr) for name, arr in prologue.items()}
    args = bind_args(recording, compiled, buffers)
    return Prepared(recording, be, compiled, policies, buffers, args, compile_s, prologue)
