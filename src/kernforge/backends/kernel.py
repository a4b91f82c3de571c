"""``kernforge.Kernel``: a kernel an application calls like a function.

Launch observers (the recorder, deployment logging, in-application timing) see every call:
``before`` runs before the launch with the arguments, ``after`` once the launch finished (with
the exception if it failed).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Protocol, Sequence

from ..core import ConfigError, KernelSource, LaunchConfig, Tolerance, Variant
from .base import Backend, Compiled, get_backend, options_from


class LaunchObserver(Protocol):
    def before(self, kernel: "Kernel", compiled: Compiled, args: Sequence[Any],
               launch: LaunchConfig) -> Any: ...

    def after(self, token: Any, error: BaseException | None) -> None: ...


_observers: list[LaunchObserver] = []
_observers_lock = threading.Lock()


def add_observer(observer: LaunchObserver) -> None:
    with _observers_lock:
        _observers.append(observer)


def remove_observer(observer: LaunchObserver) -> None:
    with _observers_lock:
        if observer in _observers:
            _observers.remove(observer)


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
        return bool(self.tolerance) and all(not t.exact for t in self.tolerance.values())

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
        with _observers_lock:
            observers = list(_observers)
        tokens = [(o, o.before(self, compiled, args, cfg)) for o in observers]
        error: BaseException | None = None
        try:
            self.backend.launch(compiled, args, cfg)
            if tokens:
                self.backend.synchronize()
        except BaseException as exc:
            error = exc
            raise
        finally:
            for o, tok in reversed(tokens):
                o.after(tok, error)

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, backend={self.backend.name!r})"
