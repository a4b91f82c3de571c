"""Device state a worker keeps between requests: one prepared replay per recording unit (the
service's workers and the supervised workers of :mod:`.isolate` both keep one).

Preparing a recording (:func:`kernforge.replay.prepare.prepare`) allocates its buffers on the
device, uploads the prologue twice (working buffers and pristine copies) and, on backends that
fingerprint on the device, uploads every expected output once to take its fingerprint. A worker
does that once per unit and binds every later candidate of the unit to the same state
(``evaluate_variant(..., state=...)``). Reuse is sound because the engine restores from the
pristine copies before every run and verifies every output afterwards; what this module adds is
a check that the pristine copies themselves are intact after each evaluation (device
fingerprints taken when the state was built, or, where the backend verifies on the host, a
byte comparison with the recording's prologue). A state whose pristine copies changed is
dropped, and the evaluation that changed them fails: its candidate wrote outside its arguments.

States are keyed by (unit path, content digest of the unit's arguments, backend name) and held
in an LRU bounded by bytes (buffers plus pristine copies; ``state_cache_mb`` of the service
configuration, 0 disables). A state larger than the bound is used for its request and dropped.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core import Measurement, Recording, Status
from .prepare import Prepared

DEFAULT_STATE_CACHE_MB = 8192  # per worker: the bound of the states kept (buffers + pristine)

StateKey = tuple[str, str, str]  # (unit path, content digest, backend name)


def content_digest(recording: Recording) -> str:
    """What a unit's device state depends on: argument names, kinds, shapes, dtypes, scalar
    values and blob ids (blobs are content-addressed), and the backend."""
    text = repr((recording.backend, [(a.name, a.kind, a.dtype, tuple(a.shape), repr(a.value),
                                      a.prologue, a.epilogue) for a in recording.args]))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_key(path: str, recording: Recording, backend_name: str) -> StateKey:
    return (path, content_digest(recording), backend_name)


def pristine_marks(p: Prepared) -> list[tuple[int, int]] | None:
    """Device fingerprints of the pristine copies, or None where the backend has none."""
    bufs = list(p.pristine.values())
    got = p.backend.fingerprints(bufs)
    return list(got) if got is not None and len(got) == len(bufs) else None


def pristine_intact(p: Prepared, marks: list[tuple[int, int]] | None) -> bool:
    """True when every pristine copy still holds what it held when the state was built."""
    if marks is not None:
        now = pristine_marks(p)
        if now is not None:
            return now == marks
    for name, buf in p.pristine.items():
        want = np.ascontiguousarray(p.recording.prologue(name)).reshape(-1).view(np.uint8)
        got = np.ascontiguousarray(p.backend.to_host(buf)).reshape(-1).view(np.uint8)
        if not np.array_equal(got, want):
            return False
    return True


@dataclass
class Held:
    """One unit's device state, and what it cost."""

    key: StateKey
    prepared: Prepared
    nbytes: int
    marks: list[tuple[int, int]] | None
    reused: bool = False  # True when this request did not build it


@dataclass
class DeviceStates:
    """The LRU of prepared states of one worker (checked out while a request uses one)."""

    limit_bytes: int = DEFAULT_STATE_CACHE_MB << 20
    _held: OrderedDict[StateKey, Held] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    prepares: Counter[str] = field(default_factory=Counter)  # unit path -> states built
    reuses: Counter[str] = field(default_factory=Counter)  # unit path -> states reused
    evictions: int = 0  # dropped to stay within the bound (or too large to keep)
    discarded: int = 0  # dropped because their pristine copies changed

    def checkout(self, key: StateKey, build: Callable[[], Prepared], need: int = 0) -> Held:
        """The state of ``key``, taken out of the cache (built when there is none, after
        dropping least recently used states to make room for ``need`` bytes when that fits the
        bound); give it back with :meth:`checkin`. A concurrent request for the same key builds
        its own."""
        with self._lock:
            held = self._held.pop(key, None)
            while held is None and self._held and need <= self.limit_bytes \
                    and self.held_bytes + need > self.limit_bytes:
                self._held.popitem(last=False)
                self.evictions += 1
        if held is not None:
            held.reused = True
            self.reuses[key[0]] += 1
            return held
        prepared = build()
        self.prepares[key[0]] += 1
        return Held(key, prepared, prepared.nbytes, pristine_marks(prepared))

    def checkin(self, held: Held) -> bool:
        """Return a state after use. False (and the state is dropped) when its pristine copies
        changed; otherwise it is kept as the most recently used, and the least recently used
        states beyond the bound are dropped."""
        try:
            intact = pristine_intact(held.prepared, held.marks)
        except Exception:  # noqa: BLE001 - a state that cannot be checked is not kept
            intact = False
        if not intact:
            self.discarded += 1
            return False
        held.reused = False
        with self._lock:
            old = self._held.pop(held.key, None)  # a concurrent request's copy: keep the newer
            if old is not None:
                self.evictions += 1
            self._held[held.key] = held
            while self._held and self.held_bytes > self.limit_bytes:
                self._held.popitem(last=False)
                self.evictions += 1
        return True

    @property
    def held_bytes(self) -> int:
        return sum(h.nbytes for h in self._held.values())

    def drop_unit(self, path: str) -> None:
        """Forget every state of the unit at ``path`` (it was recorded again)."""
        with self._lock:
            for key in [k for k in self._held if k[0] == path]:
                del self._held[key]

    def settle(self, held: Held | None, m: Measurement) -> Measurement:
        """Give ``held`` back after the evaluation ``m`` ran on it (:meth:`checkin`); an
        evaluation that changed the pristine copies fails: its candidate wrote outside its
        arguments."""
        if held is None or self.checkin(held):
            return m
        return replace(m, status=Status.RUNTIME_FAILED, samples=(), message=(
            "the candidate wrote outside its arguments: the pristine copies of the prologue "
            "changed during its evaluation (the worker dropped that device state)"
            + (f"\n{m.message}" if m.message else "")),
            extra=m.extra + (("reason", "runtime:failed"),))

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            held = [k[0] for k in self._held]
            nbytes = self.held_bytes
        return {"limit_bytes": self.limit_bytes, "held": held, "bytes": nbytes,
                "prepares": sum(self.prepares.values()), "reuses": sum(self.reuses.values()),
                "evictions": self.evictions, "discarded": self.discarded,
                "units": {p: {"prepares": self.prepares[p], "reuses": self.reuses[p]}
                          for p in sorted(set(self.prepares) | set(self.reuses))}}
