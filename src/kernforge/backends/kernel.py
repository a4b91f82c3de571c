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
)

__all__ = ["Kernel", "LaunchEvent", "LaunchObserver", "add_observer", "remove_observer"]


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

    def __call__(self, *args: Any, launch: LaunchConfig | None = None, grid: Any = None,
                 block: Any = None, shared_mem: int | None = None,
                 threads: int | None = None) -> None:
        compiled = self.compiled()
        cfg = self.launch_config(launch, grid=grid, block=block, shared_mem=shared_mem,
                                 threads=threads)
        if not active():  # no observer, no deployment: straight through
            self.backend.launch(compiled, args, cfg)
            return
        event = LaunchEvent(backend=self.backend, variant=replace(compiled.variant, launch=cfg),
                            signature=compiled.signature, args=tuple(args),
                            tolerance=tuple(self.tolerance.items()))
        notify_launch(event, lambda: self.backend.launch(compiled, args, cfg))

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, backend={self.backend.name!r})"
