"""The capture interface: one :class:`LaunchEvent` per kernel launch, seen by launch observers.

Every capture source builds the same event and runs the observers the same way, through
:func:`notify_launch`: :class:`kernforge.Kernel` (``kernel.py``), the CuPy hooks
(``cupy_hooks.py``), and later a driver-level interposer. Consumers (the recorder, in-application
timing, deployment) depend on this module only, never on where a launch came from.

An observer has two methods: ``before(event) -> token`` runs before the launch (the arguments
hold their contents before the kernel ran), ``after(token, error)`` once the launch finished and
the device was synchronized (``error`` is the exception when it failed, else None).

At most one *launch substituter* (:func:`set_substituter`; the deployment of a tuned spec,
:mod:`kernforge.deploy`) may replace a launch: ``substitute(event, launch)`` returns None (run
the launch as the application made it) or ``(event, launch)`` of what runs instead; observers
then see the substituted event. Capture sources check :func:`active` once per launch: with no
observer and no substituter, a launch goes straight through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..core.model import CompileOptions, KernelSource, LaunchConfig, Param, Variant

if TYPE_CHECKING:  # pragma: no cover - typing only (the recording model imports numpy)
    from ..core.recording import Tolerance
    from .base import Backend

T = TypeVar("T")


@dataclass(frozen=True)
class LaunchEvent:
    """One kernel launch, as a recorder needs it.

    - ``backend``: the backend instance that can compile, hold and read back this kernel's
      memory (``to_host`` snapshots the array arguments);
    - ``variant``: what was actually launched: source, *resolved* compile options, the launch
      configuration of this call, ``#define``s and compiled-in constants;
    - ``signature``: the entry's parameters; ``args``: one value per parameter, in signature
      order (arrays as the backend's buffers, scalars convertible to the declared dtype);
    - ``tolerance``: per-buffer correctness policies declared by the application (name,
      policy) pairs; an array without one is verified bitwise;
    - ``capture``: free-form, JSON-serializable provenance (``origin``: which capture source,
      and e.g. the mangled symbol or the original option strings); recorders store it as is.
      Empty for :class:`kernforge.Kernel` launches (the event says everything).
    """

    backend: Backend
    variant: Variant
    signature: tuple[Param, ...]
    args: tuple[Any, ...]
    tolerance: tuple[tuple[str, Tolerance], ...] = ()
    capture: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The entry-point name (what recorders filter on and name units after)."""
        return self.variant.source.entry

    @property
    def launch(self) -> LaunchConfig:
        return self.variant.launch

    @property
    def pairs(self) -> tuple[tuple[Param, Any], ...]:
        """(parameter, value) in signature order (shorter if the call had too few args)."""
        return tuple(zip(self.signature, self.args))

    def policy(self, name: str) -> Tolerance:
        """The declared tolerance of buffer ``name`` (bitwise when none was declared)."""
        from ..core.recording import Tolerance

        return dict(self.tolerance).get(name, Tolerance())


class LaunchObserver(Protocol):
    """``before`` and ``after`` are required. An observer may also define ``launched(token)``:
    called right after the launch call returns, before synchronizing (e.g. to record a CUDA
    event that closes a timed region exactly at the kernel's end on the stream)."""

    def before(self, event: LaunchEvent) -> Any: ...

    def after(self, token: Any, error: BaseException | None) -> None: ...


class LaunchSubstituter(Protocol):
    """Replaces launches: ``substitute(event, launch)`` returns None to let ``launch`` run
    unchanged, or the event (or a callable making it, called only when observers need it)
    and the callable of what runs instead. ``covers(backend, source,
    options, defines)`` is the cheap question a capture source may ask before building an
    event (see :func:`wants_event`): False means no launch of this kernel, built this way, is
    replaced (the substituter accounts for that launch itself). Neither may raise."""

    def covers(self, backend: Backend, source: KernelSource, options: CompileOptions,
               defines: tuple[tuple[str, str], ...]) -> bool: ...

    def substitute(self, event: LaunchEvent, launch: Callable[[], Any]
                   ) -> tuple[LaunchEvent | Callable[[], LaunchEvent], Callable[[], Any]] | None:
        ...


_observers: list[LaunchObserver] = []
_observers_lock = threading.Lock()
_substituter: LaunchSubstituter | None = None
_active = False  # observers or a substituter: the one check on every launch's fast path


def _update_active() -> None:
    global _active
    _active = bool(_observers) or _substituter is not None


def add_observer(observer: LaunchObserver) -> None:
    with _observers_lock:
        _observers.append(observer)
        _update_active()


def remove_observer(observer: LaunchObserver) -> None:
    with _observers_lock:
        if observer in _observers:
            _observers.remove(observer)
        _update_active()


def set_substituter(substituter: LaunchSubstituter | None) -> LaunchSubstituter | None:
    """Install (or, with None, remove) the launch substituter; returns the previous one."""
    global _substituter
    with _observers_lock:
        previous, _substituter = _substituter, substituter
        _update_active()
    return previous


def substituter() -> LaunchSubstituter | None:
    return _substituter


def active() -> bool:
    """Cheap check for the launch fast path: True when observers or a substituter exist."""
    return _active


def wants_event(backend: Backend, source: KernelSource, options: CompileOptions,
                defines: tuple[tuple[str, str], ...]) -> bool:
    """For capture sources whose events are costly to build (the CuPy hooks): True when a
    launch of this kernel must become an event -- observers exist, or the substituter covers
    the kernel; else the launch may go straight through (one call per launch)."""
    if _observers:
        return True
    sub = _substituter
    return sub is not None and sub.covers(backend, source, options, defines)


def observers() -> tuple[LaunchObserver, ...]:
    """A snapshot of the registered observers, in registration order."""
    with _observers_lock:
        return tuple(_observers)


def has_observers() -> bool:
    """Cheap check for the launch fast path: no lock, no allocation."""
    return bool(_observers)


def notify_launch(event: LaunchEvent | Callable[[], LaunchEvent | None],
                  launch: Callable[[], T], *,
                  synchronize: Callable[[], None] | None = None) -> T:
    """Run ``launch()`` with every observer around it; return what ``launch`` returned.

    ``event`` may be a factory, called only when observers or a substituter exist (it may
    return None: the launch then runs unobserved and unsubstituted). A substituter may first
    replace the event and the launch. With observers: each ``before(event)`` in registration order,
    the launch, ``synchronize()`` (default: ``event.backend.synchronize``) so that ``after``
    sees the finished results and any device error, then each ``after(token, error)`` in
    reverse order, also when the launch (or a ``before``) raised; the error propagates.
    """
    current = observers() if _observers else ()
    sub = _substituter
    if not current and sub is None:
        return launch()
    ev = event() if callable(event) else event
    if ev is None:
        return launch()
    if sub is not None:
        replaced = sub.substitute(ev, launch)
        if replaced is not None:
            made, launch = replaced
            if not current:
                return launch()
            ev = made if isinstance(made, LaunchEvent) else made()
    if not current:
        return launch()
    tokens: list[tuple[LaunchObserver, Any]] = []
    error: BaseException | None = None
    try:
        for o in current:
            tokens.append((o, o.before(ev)))
        result = launch()
        for o, tok in tokens:
            launched = getattr(o, "launched", None)
            if launched is not None:
                launched(tok)
        (synchronize or ev.backend.synchronize)()
        return result
    except BaseException as exc:
        error = exc
        raise
    finally:
        for o, tok in reversed(tokens):
            o.after(tok, error)
