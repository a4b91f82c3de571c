"""``kernforge.Kernel``: a kernel an application calls like a function.

Launch observers (the recorder, in-application timing) see every call as a
:class:`~kernforge.backends.events.LaunchEvent`: ``before(event)`` runs before the launch,
``after(token, error)`` once the launch finished (with the exception if it failed). A launch
substituter (an active deployment) may run a tuned variant instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..core import ConfigError, KernelSource, LaunchConfig, Tolerance, Variant
from .base import Backend, Compiled, get_backend, options_from
from .events import (
    LaunchEvent,
    LaunchObserver,
    active,
    add_observer,
    notify_launch,
    remove_observer,
    wants_event,
)

__all__ = ["Kernel", "LaunchEvent", "LaunchObserver", "add_observer", "remove_observer"]

_CALLS = 64  # launch configurations remembered per kernel


def _exact(value: Any) -> bool:
    """None, an int or a tuple of ints: equal values of these mean equal launches."""
    return value is None or type(value) is int or (
        type(value) is tuple and all(type(v) is int for v in value))


class Kernel:
    """A compiled-on-first-call kernel bound to a backend.

    >>> k = Kernel(C_SOURCE, "axpy", backend="cpu", options={"opt_level": "O3"})
    >>> k(x, y, 2.0, n, threads=4)
    """

    def __init__(self, source: str | KernelSource, entry: str | None = None, *,
                 backend: str | Backend = "cpu", language: str | None = None,
                 options: Mapping[str, Any] | None = None,
                 defines: Mapping[str, Any] | None = None,
                 launch: LaunchConfig | None = None,
                 tolerance: Mapping[str, Tolerance | str] | None = None) -> None:
        self.backend = get_backend(backend)
        if isinstance(source, KernelSource):
            self.source = source
        else:
            if entry is None:
                raise ConfigError("Kernel(source, entry): the entry point name is missing",
                                  hint="pass the name of the kernel function as entry")
            self.source = KernelSource(source, entry, language or self.backend.language)
        self.variant = Variant(self.source, options_from(options), launch or LaunchConfig(),
                               tuple((defines or {}).items()))
        self.tolerance = {k: v if isinstance(v, Tolerance) else Tolerance.parse(v)
                          for k, v in (tolerance or {}).items()}
        self._compiled: Compiled | None = None
        self._calls: dict[tuple[Any, ...], tuple[LaunchConfig, Variant]] = {}

    @property
    def name(self) -> str:
        return self.source.entry

    @property
    def tolerant(self) -> bool:
        """True when every buffer the kernel may write (non-const pointer) declares a
        tolerance; a tolerance naming no pointer parameter is refused."""
        sig = self.backend.signature_for(self.variant)
        pointers = {p.name for p in sig if p.pointer}
        unknown = sorted(set(self.tolerance) - pointers)
        if unknown:
            raise ConfigError(f"tolerance given for {', '.join(map(repr, unknown))}, not an array "
                              f"parameter of {self.name}",
                              hint=f"array parameters are: {', '.join(sorted(pointers))}")
        outputs = [p.name for p in sig if p.pointer and not p.const]
        return bool(outputs) and all(n in self.tolerance and not self.tolerance[n].exact
                                     for n in outputs)

    def compiled(self) -> Compiled:
        if self._compiled is None:
            self._compiled = self.backend.compile(self.variant, tolerant=self.tolerant)
        return self._compiled

    def launch_config(self, launch: LaunchConfig | None = None, *, grid: Any = None,
                      block: Any = None, shared_mem: int | None = None,
                      threads: int | None = None) -> LaunchConfig:
        base = launch or self.variant.launch
        return LaunchConfig(grid=grid if grid is not None else base.grid,
                            block=block if block is not None else base.block,
                            shared_mem=shared_mem if shared_mem is not None else base.shared_mem,
                            threads=threads if threads is not None else base.threads)

    def _configured(self, compiled: Compiled, launch: LaunchConfig | None, grid: Any,
                    block: Any, shared_mem: int | None, threads: int | None
                    ) -> tuple[LaunchConfig, Variant]:
        """The launch configuration of a call and the variant launched with it, remembered
        per call arguments (a time loop makes the same call over and over)."""
        key = (launch, grid, block, shared_mem, threads)
        exact = all(_exact(v) for v in (grid, block, shared_mem, threads))
        hit = self._calls.get(key) if exact else None  # else: e.g. a list, or a float
        if hit is None:
            cfg = self.launch_config(launch, grid=grid, block=block, shared_mem=shared_mem,
                                     threads=threads)
            hit = (cfg, replace(compiled.variant, launch=cfg))
            if exact:
                if len(self._calls) >= _CALLS:
                    self._calls.clear()
                self._calls[key] = hit
        return hit

    def __call__(self, *args: Any, launch: LaunchConfig | None = None, grid: Any = None,
                 block: Any = None, shared_mem: int | None = None,
                 threads: int | None = None) -> None:
        compiled = self.compiled()
        cfg, variant = self._configured(compiled, launch, grid, block, shared_mem, threads)
        # no observer, no deployment, or a deployment that replaces no launch of this kernel
        # (it counts the launch itself): straight through
        if not active() or not wants_event(self.backend, variant.source, variant.options,
                                           variant.defines):
            self.backend.launch(compiled, args, cfg)
            return
        event = LaunchEvent(backend=self.backend, variant=variant,
                            signature=compiled.signature, args=tuple(args),
                            tolerance=tuple(self.tolerance.items()))
        notify_launch(event, lambda: self.backend.launch(compiled, args, cfg))

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, backend={self.backend.name!r})"
