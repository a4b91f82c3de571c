"""The tuned launch of a cached decision: checked in full once, then only what can still change.

``Backend.launch`` checks every launch in full: the geometry against the device, the number of
arguments, that each array is one of the backend's buffers with the declared dtype, C-contiguous
and (for a written parameter) writeable, converts each scalar to its declared width and compares
compiled-in constants with the arguments. A decision of :mod:`.fastpath` is cached under a key
that already fixes most of that: the geometry (the tuned one, fixed per decision), the number
of arguments, each array's type, dtype and shape, and the type and value of the scalars an
entry matches by value (integers, bools, compiled-in constants). So the first launch of a
cached decision goes through ``Backend.launch``, and :func:`prepare` then builds what the next
launches under the same key run instead (:class:`FastLaunch`): per array, only the contiguity
and writeability test (not in the key); per value-matched scalar, the value converted at the
first launch; per other scalar, the argument itself when it already has the declared numpy
type, a Python float converted directly where that is exact (``float64``; ``float32`` within
range), anything else back to the full path; and the launch of the compiled kernel with the
geometry checked once (the cuda backend's ``prepared_launch``: CuPy's own launch call).

A :class:`FastLaunch` returns False (and launches nothing) when an argument needs more than
that; the caller then runs ``Backend.launch``, which converts, or refuses, as before. So a fast
launch runs exactly when the full path would have launched the same converted arguments
(tests/deploy/test_launcher.py compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backends import Backend, Compiled, cupy_hooks
from ..backends.base import cached_dtype
from ..core import LaunchConfig
from .straight import conversion

FLOAT32_MAX = float(np.finfo(np.float32).max)
_ARRAY, _WRITTEN, _FIXED, _SCALAR = range(4)


def launcher(backend: Backend, compiled: Compiled, launch: LaunchConfig
             ) -> Callable[[Sequence[Any]], None]:
    """A callable launching ``compiled`` with ``launch`` for converted arguments: the
    backend's ``prepared_launch`` (cuda: the geometry checked once, then CuPy's launch), else
    the launch checked once here and the backend's launch of converted arguments."""
    prepared = getattr(backend, "prepared_launch", None)
    if prepared is not None:
        fire: Callable[[Sequence[Any]], None] = prepared(compiled, launch)
        return fire
    backend.check_launch(launch)
    handle, run = compiled.handle, backend._launch  # the ABC's launch of converted arguments

    def launch_converted(args: Sequence[Any]) -> None:
        run(handle, args, launch)

    return launch_converted


class FastLaunch:
    """Launches the arguments of later launches under one decision key (see the module doc);
    ``__call__`` returns False, launching nothing, when an argument needs the full path."""

    __slots__ = ("check", "constants", "fire", "steps")

    def __init__(self, steps: tuple[tuple[int, Any], ...], fire: Callable[[Sequence[Any]], None],
                 constants: Callable[[Sequence[Any]], None] | None) -> None:
        self.steps, self.fire, self.constants = steps, fire, constants

    def __call__(self, args: Sequence[Any]) -> bool:
        if len(args) != len(self.steps):  # the key fixes the count; never trust it blindly
            return False
        out: list[Any] = []
        for (kind, x), a in zip(self.steps, args):
            if kind == _FIXED:
                out.append(x)
            elif kind == _SCALAR:
                t = type(a)
                if t is x:
                    out.append(a)
                elif t is float and (x is np.float64 or (
                        x is np.float32 and -FLOAT32_MAX <= a <= FLOAT32_MAX)):
                    out.append(x(a))  # exact: what Backend.convert_args makes of it
                else:
                    return False
            else:
                flags = getattr(a, "flags", None)
                if flags is not None and not (getattr(flags, "c_contiguous", True) and (
                        kind == _ARRAY or getattr(flags, "writeable", True))):
                    return False
                out.append(a)
        if self.constants is not None:
            self.constants(out)
        self.fire(out)
        return True


def prepare(backend: Backend, compiled: Compiled, launch: LaunchConfig, args: Sequence[Any],
            fixed: frozenset[int], keyed: frozenset[int]) -> FastLaunch:
    """The fast launch of later launches like ``args`` (which ``Backend.launch`` just accepted
    with ``compiled`` and ``launch``). ``keyed``: the positions of the scalars whose type and
    value the decision key holds (compiled-in constants there need no check per launch);
    ``fixed``: those whose converted value is reused (integers, bools)."""
    converted = backend.convert_args(compiled, args)
    steps: list[tuple[int, Any]] = []
    for j, p in enumerate(compiled.signature):
        if p.pointer:
            steps.append((_ARRAY if p.const else _WRITTEN, None))
        elif j in fixed:
            steps.append((_FIXED, converted[j]))
        else:
            steps.append((_SCALAR, cached_dtype(p.dtype).type))
    names = {p.name: j for j, p in enumerate(compiled.signature)}
    constants = compiled.variant.constants
    per_launch = None
    if constants and not all(names.get(name) in keyed for name, _ in constants):
        def per_launch(out: Sequence[Any]) -> None:
            backend.check_constants(compiled, out)
    return FastLaunch(tuple(steps), launcher(backend, compiled, launch), per_launch)


# ---- one pass for a routed launch -----------------------------------------------------------
_IN, _OUT, _CONST, _TYPED = KINDS = (0, 1, 2, 3)
DirectConversion = Callable[[Sequence[Any]], "list[Any] | None"]


def direct_steps(fast: FastLaunch, route: tuple[tuple[int, Any], ...]
                 ) -> tuple[tuple[int, Any], ...] | None:
    """The two conversions of a routed CuPy launch as one, where both are simple: ``route``
    (the hooks' per-argument steps, backends/cupy_hooks.py) turns the raw arguments into the
    event's, ``fast`` those into the kernel's. Per argument: an array passed as it is
    (``_IN``; ``_OUT`` where the kernel writes it), checked C-contiguous as the hooks check
    it and, for ``_OUT``, writeable as ``fast`` checks it; a scalar passed as it is when it
    has the declared numpy type (``_TYPED``, the type both check); one value (``_CONST``, a
    keyed scalar's conversion). Anything else (an array viewed as another dtype, a scalar
    widened or converted) makes None: such routes keep the two passes."""
    if len(route) != len(fast.steps):
        return None
    steps: list[tuple[int, Any]] = []
    for (hook, h), (kind, x) in zip(route, fast.steps):
        if hook == cupy_hooks.SAME and kind in (_ARRAY, _WRITTEN):
            steps.append((_IN if kind == _ARRAY else _OUT, None))
        elif hook == cupy_hooks.FIXED and kind == _FIXED:
            steps.append((_CONST, x))
        elif hook == cupy_hooks.FIXED and kind == _SCALAR and type(h) is x:
            steps.append((_CONST, h))
        elif hook == cupy_hooks.SCALAR and kind == _SCALAR and h[1] is x:
            steps.append((_TYPED, x))
        else:
            return None
    return tuple(steps)


def fallback_steps(route: tuple[tuple[int, Any], ...]) -> tuple[tuple[int, Any], ...] | None:
    """The hooks' checks of a route whose decision is a fallback (the original runs: the
    conversion only tells a routed launch from one the event path would refuse), in the
    kinds of :func:`direct_steps`; None where an array is viewed (the hooks' steps then)."""
    steps: list[tuple[int, Any]] = []
    for hook, h in route:
        if hook == cupy_hooks.SAME:
            steps.append((_IN, None))
        elif hook == cupy_hooks.FIXED:
            steps.append((_CONST, h))
        elif hook == cupy_hooks.SCALAR:
            steps.append((_TYPED, h[1]))
        else:
            return None
    return tuple(steps)


def direct(fast: FastLaunch | None, route: tuple[tuple[int, Any], ...]
           ) -> DirectConversion | None:
    """:func:`direct_steps` (``fast`` None: :func:`fallback_steps`) as one function of the
    raw arguments (:mod:`.straight`): the kernel's arguments, or None, having done nothing,
    when one needs more than its step checks; the two passes then run, so a launch is
    converted and checked exactly as they would, and refused where they would refuse it."""
    steps = fallback_steps(route) if fast is None else direct_steps(fast, route)
    return None if steps is None else conversion(steps, KINDS)
