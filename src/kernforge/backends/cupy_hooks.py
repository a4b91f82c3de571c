"""Capture the launches of unmodified CuPy applications: ``cupy.RawKernel`` and ``cupy.RawModule``.

:func:`install` replaces the two names on the ``cupy`` module with subclasses: the RawKernel
subclass intercepts ``__call__``; the RawModule subclass's ``get_function`` returns a thin
:class:`KernelProxy` around CuPy's own RawKernel that intercepts ``__call__`` and forwards every
other attribute (reads and writes). :func:`uninstall` puts the original classes back.

With no launch observer and no launch substituter registered a call goes straight to CuPy
(one check). With observers, each launch becomes a
:class:`~kernforge.backends.events.LaunchEvent` (see :mod:`.cupy_translate` for how kernels,
options and arguments are translated), run through
:func:`~kernforge.backends.events.notify_launch` with the whole device synchronized before the
observers' ``before`` and after the launch. CuPy always receives the application's own
arguments. A kernel or launch that cannot be recorded faithfully runs unrecorded, with one
:class:`~kernforge.backends.cupy_translate.CaptureWarning` per kernel and reason. With only a
substituter (a deployment, :mod:`kernforge.deploy`), the event is built without synchronizing
and the substituter may launch a tuned kernel instead; what it cannot describe runs unchanged,
without a warning. A deployment also offers *routes* (see the comment above
:func:`_plan`): a launch keyed like one it decided before (geometry, array dtypes and
shapes, the scalars it matches by value, overlaps) runs that decision directly, its arguments
converted as ``convert_args`` would, without an event.

Not captured: kernels made before :func:`install` (create them after it, or install early with
``kernforge.record.install_cupy_hooks()``), ``ElementwiseKernel``/``ReductionKernel`` and the
kernels CuPy and cupyx build internally (a driver-level interposer is a later capture source).
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import KernforgeError, LaunchConfig, Param
from . import base, events
from .base import cached_dtype, get_backend
from .cupy_translate import (
    UNSUPPORTED_FLAGS,
    CaptureWarning,
    KernelInfo,
    Unrecordable,
    convert_args,
    describe_kernel,
    launch_config,
    prepare_buffer,
    widen_scalar,
)
from .events import LaunchEvent, notify_launch, wants_event

__all__ = ["KernelProxy", "install", "installed", "original_class", "uninstall"]

HOOKED = ("RawKernel", "RawModule")
_lock = threading.Lock()
_originals: dict[str, type] = {}
_classes: dict[tuple[type, type], tuple[type, type]] = {}
_infos: dict[tuple[Any, ...], KernelInfo | str] = {}
_launches: dict[tuple[Any, ...], LaunchConfig] = {}
_MAX_LAUNCHES = 1024
_warned: set[tuple[str, str]] = set()


def installed() -> bool:
    return bool(_originals)


def original_class(cupy_module: Any, name: str) -> type:
    """CuPy's own ``RawKernel``/``RawModule``, also while the hooks are installed."""
    return _originals.get(name) or getattr(cupy_module, name)


def install() -> bool:
    """Replace ``cupy.RawKernel``/``cupy.RawModule``; False when already installed."""
    import cupy

    with _lock:
        if _originals:
            return False
        originals = (cupy.RawKernel, cupy.RawModule)
        if originals not in _classes:
            _classes[originals] = _make_classes(*originals)
        _originals.update(zip(HOOKED, originals))
        cupy.RawKernel, cupy.RawModule = _classes[originals]
        return True


def uninstall() -> bool:
    """Put CuPy's classes back; False when the hooks were not installed."""
    with _lock:
        if not _originals:
            return False
        cupy = sys.modules["cupy"]
        for name in HOOKED:
            setattr(cupy, name, _originals.pop(name))
        return True


# ---- the classes ----------------------------------------------------------------------------
class _Transparent(type):
    """``isinstance(x, cupy.RawKernel)`` stays true for CuPy's own instances while hooked."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.__bases__[0])

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.__bases__[0])


def _flags(kwargs: dict[str, Any]) -> dict[str, bool]:
    return {f: bool(kwargs.get(f, False)) for f in UNSUPPORTED_FLAGS}


def _make_classes(raw_kernel: type, raw_module: type) -> tuple[type, type]:
    class RawKernel(raw_kernel, metaclass=_Transparent):  # type: ignore[misc,valid-type]
        __doc__ = raw_kernel.__doc__

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._kf_flags = _flags(kwargs)
            self._kf_info: KernelInfo | tuple[str, str] | None = None

        def __call__(self, grid: Any, block: Any, args: Any, **kwargs: Any) -> Any:
            if not events._active:  # events.active(), without the call
                return raw_kernel.__call__(self, grid, block, args, **kwargs)
            if self._kf_info is None:
                self._kf_info = _info(self, None, self._kf_flags, "cupy.RawKernel")
            return _observed(self._kf_info, grid, block, args, kwargs,
                             lambda: raw_kernel.__call__(self, grid, block, args, **kwargs))

        def __reduce_ex__(self, protocol: Any) -> Any:  # pickles as CuPy's own class
            return raw_kernel.__new__, (raw_kernel,), self.__getstate__()

    class RawModule(raw_module, metaclass=_Transparent):  # type: ignore[misc,valid-type]
        __doc__ = raw_module.__doc__

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._kf_flags = _flags(kwargs)

        def get_function(self, name: str) -> Any:
            kernel = raw_module.get_function(self, name)  # type: ignore[attr-defined]
            expr = name if name in (self.name_expressions or ()) else None
            return KernelProxy(kernel, expr, self._kf_flags)

    for cls, orig in ((RawKernel, raw_kernel), (RawModule, raw_module)):
        cls.__module__, cls.__qualname__ = __name__, f"hooked_{orig.__name__}"
    return RawKernel, RawModule


class KernelProxy:
    """CuPy's RawKernel from ``RawModule.get_function``, with ``__call__`` observed."""

    __slots__ = ("_kf_expr", "_kf_flags", "_kf_info", "_kf_kernel")

    def __init__(self, kernel: Any, name_expression: str | None,
                 flags: dict[str, bool]) -> None:
        object.__setattr__(self, "_kf_kernel", kernel)
        object.__setattr__(self, "_kf_expr", name_expression)
        object.__setattr__(self, "_kf_flags", flags)
        object.__setattr__(self, "_kf_info", None)

    def __call__(self, grid: Any, block: Any, args: Any, **kwargs: Any) -> Any:
        kernel = self._kf_kernel
        if not events._active:
            return kernel(grid, block, args, **kwargs)
        info = self._kf_info
        if info is None:
            info = _info(kernel, self._kf_expr, self._kf_flags, "cupy.RawModule")
            object.__setattr__(self, "_kf_info", info)
        return _observed(info, grid, block, args, kwargs,
                         lambda: kernel(grid, block, args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kf_kernel, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._kf_kernel, name, value)

    def __dir__(self) -> list[str]:
        return dir(self._kf_kernel)

    def __repr__(self) -> str:
        return repr(self._kf_kernel)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._kf_kernel.__reduce_ex__(protocol)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(proxy, cupy.RawKernel) holds
        return type(self._kf_kernel)


# ---- one observed launch --------------------------------------------------------------------
def _warn_once(name: str, reason: str) -> None:
    if (name, reason) not in _warned:
        _warned.add((name, reason))
        warnings.warn(f"kernforge: not recording CuPy kernel {name}: {reason}", CaptureWarning,
                      stacklevel=4)


def _info(kernel: Any, expr: str | None, flags: dict[str, bool], origin: str
          ) -> KernelInfo | tuple[str, str]:
    """The kernel in kernforge terms, else (its name, why it cannot be captured). Each hooked
    kernel asks once and keeps the answer: a CuPy kernel's code, symbol, options and flags
    do not change."""
    flags = {**flags, "enable_cooperative_groups": bool(
        getattr(kernel, "enable_cooperative_groups", False))}
    key = (kernel.code, kernel.name, expr, tuple(kernel.options), kernel.backend,
           tuple(sorted(flags.items())), origin)
    info = _infos.get(key)
    if info is None:
        try:
            info = describe_kernel(kernel.code, kernel.name, kernel.options,
                                   get_backend("cuda").knobs(), name_expression=expr,
                                   compiler=kernel.backend, flags=flags, origin=origin)
        except (Unrecordable, KernforgeError) as exc:
            info = str(exc)
        _infos[key] = info
    return (expr or kernel.name, info) if isinstance(info, str) else info


def _launch(grid: Any, block: Any, shared_mem: Any) -> LaunchConfig:
    """:func:`launch_config`, remembered for the geometries a time loop repeats."""
    key = (grid, block, shared_mem)
    exact = all(_exact(v) for v in key)
    hit = _launches.get(key) if exact else None
    if hit is None:
        hit = launch_config(grid, block, shared_mem)
        if exact:
            if len(_launches) >= _MAX_LAUNCHES:
                _launches.clear()
            _launches[key] = hit
    return hit


def _exact(value: Any) -> bool:
    """An int or a tuple of ints: equal values of these mean equal geometries."""
    return type(value) is int or (type(value) is tuple and all(type(v) is int for v in value))


def _observed(info: KernelInfo | tuple[str, str], grid: Any, block: Any, args: Any,
              kwargs: dict[str, Any], call: Callable[[], Any]) -> Any:
    """One launch seen by the observers and/or the substituter (see the module docstring)."""
    observing = bool(events._observers)  # has_observers() and substituter(), without calls
    if isinstance(info, tuple):  # not capturable
        if observing:
            _warn_once(*info)
        return call()
    backend = base._instances.get("cuda") or get_backend("cuda")
    sub: Any = None
    plan: Any = None
    key: tuple[Any, ...] | None = None
    if not observing:
        sub = events._substituter
        plan, buffer = _plan(info, sub, backend)
        if plan is not None and (type(args) is tuple or type(args) is list) and (
                not kwargs or (len(kwargs) == 1 and "shared_mem" in kwargs)):
            # other keywords (enable_cooperative_groups): the event path says what happens
            key = plan.route_key(grid, block, kwargs.get("shared_mem", 0), args, buffer)
            hit = None if key is None else plan.routes.get(key)
            if hit is not None:
                one_pass = hit.direct
                if one_pass is not None:
                    out = one_pass(args)
                    if out is not None:
                        return sub.run_converted(plan, hit, out, call)
                values = _convert(hit.data, args, backend.is_buffer)
                if values is not None:
                    return sub.run_routed(plan, hit, values, call)
    if not observing and not wants_event(backend, info.source, info.options, info.defines):
        return call()  # a deployment that replaces no launch of this kernel
    runtime = sys.modules["cupy"].cuda.runtime
    if observing:
        runtime.deviceSynchronize()  # every earlier write, on any stream, is in the prologue
    try:
        if kwargs.get("enable_cooperative_groups"):
            raise Unrecordable("a cooperative launch is not replayed by kernforge")
        launch = _launch(grid, block, kwargs.get("shared_mem", 0))
        values = convert_args(info.signature, tuple(args), backend.is_buffer,
                              overlaps=observing)
    except Unrecordable as exc:
        if observing:
            _warn_once(info.source.entry, str(exc))
        return call()
    event = LaunchEvent(backend=backend, variant=info.variant(launch),
                        signature=info.signature, args=values, capture=info.capture)
    result = notify_launch(event, call, synchronize=runtime.deviceSynchronize)
    if key is not None:
        plan.learn(key, event, _steps(plan.values, info.signature, args, values))
    return result


# ---- routes: a deployment's decisions keyed by the raw CuPy call ----------------------------
# With a substituter and no observer, a substituter that has ``route(backend, source, options,
# defines, signature)`` (kernforge.deploy's Deployment) may return the kernel's plan: its
# ``route_key(grid, block, shared_mem, args, buffer_type)`` keys the raw call (None: no key),
# ``routes`` maps keys to routes (``decision``, ``data``, ``direct``) and ``learn(key, event,
# data)`` adds one after the launch became ``event``; ``live`` turns False when the
# substituter drops the plan. A hit is converted here exactly as ``convert_args`` would
# convert it (the data: per argument how, one of the step kinds below) and run by
# ``run_routed(plan, route, args, call)``; an argument needing more (a non-contiguous array, a
# scalar that does not widen) takes the event path, which refuses or converts it as before.
# A route's ``direct`` (when not None) converts the raw arguments straight to the launched
# ones, or returns None (then the steps above run): its result goes to ``run_converted(plan,
# route, out, call)``. The plan is asked for once per kernel, substituter and backend and kept
# (weakly) in the kernel's ``KernelInfo.route`` while it is live.
# the steps: the array itself, a view of it (data: the parameter), one value (data: it), the
# scalar itself when of the declared numpy type, else widened (data: parameter, that type)
SAME, VIEW, FIXED, SCALAR = range(4)
# the scalar types whose (type, value) give one widened value (a float may be -0.0 or 0.0)
_FIXABLE = frozenset({int, bool, *(np.dtype(c).type for c in "?bBhHiIlLqQ")})


def _plan(info: KernelInfo, sub: Any, backend: Any) -> tuple[Any, Any]:
    """The substituter's plan for this kernel (None: it has none, launches go through events)
    and the array type of route keys (``cupy.ndarray``), from the kernel's cache when the
    substituter, the backend and a live plan are those of the last lookup."""
    cached = info.route[0]
    if cached is not None:
        sub_ref, cached_backend, plan_ref, buffer = cached
        if sub_ref() is sub and cached_backend is backend:
            plan = plan_ref()
            if plan is not None and plan.live:
                return plan, buffer
    route = getattr(sub, "route", None)
    if route is None:
        return None, None
    plan = route(backend, info.source, info.options, info.defines, info.signature)
    if plan is None:
        return None, None
    buffer = sys.modules["cupy"].ndarray
    try:
        info.route[0] = (weakref.ref(sub), backend, weakref.ref(plan), buffer)
    except TypeError:  # not weakly referenceable: asked again on every launch
        info.route[0] = None
    return plan, buffer


def _steps(keyed: tuple[int, ...], signature: tuple[Param, ...], args: Any,
           values: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    """How later launches under this route key convert their arguments: what
    ``convert_args`` made of this launch's (``values``), per argument."""
    steps: list[tuple[int, Any]] = []
    for j, (p, a, v) in enumerate(zip(signature, args, values)):
        if p.pointer:
            steps.append((SAME, None) if v is a else (VIEW, p))
        elif j in keyed and type(a) in _FIXABLE:  # the key holds its exact type and value
            steps.append((FIXED, v))
        else:
            steps.append((SCALAR, (p, cached_dtype(p.dtype).type)))
    return tuple(steps)


def _convert(steps: tuple[tuple[int, Any], ...], args: Any,
             is_buffer: Callable[[Any], bool]) -> tuple[Any, ...] | None:
    """``convert_args(..., overlaps=False)`` of a launch under a route key (arrays of the
    key's type, dtype and shape; the keyed scalars' values), or None when it would refuse."""
    out: list[Any] = []
    for (kind, x), a in zip(steps, args):
        if kind == SAME:
            if not a.flags.c_contiguous:
                return None
            out.append(a)
        elif kind == FIXED:
            out.append(x)
        elif kind == SCALAR:
            if type(a) is x[1]:
                out.append(a)
            else:
                try:
                    out.append(widen_scalar(x[0], a))
                except Unrecordable:
                    return None
        else:
            try:
                out.append(prepare_buffer(x, a, is_buffer))
            except Unrecordable:
                return None
    return tuple(out)
