"""The per-launch fast path of a deployment: decisions cached by everything that decides them.

Whether a launch runs a tuned variant (the rules of :mod:`.match`) depends only on:

- the kernel as the application built it: backend, source, compile options, ``#define``s
  (capture sources pass the same objects on every launch, so they are looked up by identity,
  the ``#define``s by value), and the entry's signature (by identity);
- the launch geometry (grid, block, dynamic shared memory, and the thread count, which the
  tuned geometry may keep) and the number of arguments;
- per array parameter: the argument's type (``Backend.is_buffer`` is a type test), dtype and
  shape;
- per scalar parameter that some candidate entry matches by value: the argument's type and
  value (other scalars, e.g. a time step, never decide anything);
- which array arguments overlap in memory (only read when some candidate has two arrays).

A :class:`Plan` per kernel (the entries left after the kernel, device and build checks) knows
which of those to read; :meth:`Plan.key` reads them, and the decision -- a fallback
:class:`~.match.Reason`, or the :class:`Tuned` launch (entry, compiled variant, geometry) -- is
cached under that key. A repeated launch then costs the key, one dictionary lookup and the
launch itself: the first launch under a :class:`Tuned` decision is checked in full by
``Backend.launch``, the next ones run its :class:`~.launcher.FastLaunch` (only the checks the
key does not cover). Nothing else is read by the matching rules, so a cached decision is the one the
uncached path takes (tests/deploy/test_fastpath.py compares them on varied launches). A key
that cannot be hashed (e.g. a 0-d array passed as a scalar) is decided without the cache.

*Routes* go one step further for a capture source whose events are costly (the CuPy hooks): it
keys the raw launch itself (:meth:`Plan.route_key`: the geometry as passed, each array's dtype
and shape, the value-matched scalars by exact type and value, the overlaps) and a plan maps
such keys to the decision its cache holds for the event those launches become
(:meth:`Plan.learn`), with the source's own data (how it converts the arguments). Equal raw
keys make equal event keys (the source converts arrays and scalars by their type, dtype,
shape and, for the keyed scalars, value), and a route is only kept while its decision is the
one cached under the event's key (routes are emptied with the decisions), so a route
selects the decision the event path would (tests/deploy/test_cupy_fastpath.py compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..backends import Backend, Compiled, LaunchEvent
from ..core import CompileOptions, KernelSource, LaunchConfig, Param, Tolerance, Variant
from . import straight
from .counts import KernelCounts
from .launcher import DirectConversion, FastLaunch, direct
from .match import Reason, overlap_bits, overlaps
from .spec import DeployEntry

MAX_DECISIONS = 1024  # per plan; emptied when full (an application with ever-new buffers)
MAX_PLANS = 4096
# scalars keyed by exact type and value in a route key: equal ones convert to equal values
KEYABLE = frozenset({int, float, bool, *(np.dtype(c).type for c in "?bBhHiIlLqQefdg")})


def _exact(dims: Any) -> bool:
    """An int or a tuple of ints (a geometry as a capture source may pass it)."""
    t = type(dims)
    if t is tuple:
        for v in dims:
            if type(v) is not int:
                return False
        return True
    return t is int


def _route_key_loop(pointers: tuple[int, ...], values: tuple[int, ...], aliasing: bool,
                    grid: Any, block: Any, shared_mem: Any, args: Sequence[Any], buffer: Any
                    ) -> tuple[Any, ...] | None:
    if type(shared_mem) is not int or not _exact(grid) or not _exact(block):
        return None
    n = len(args)
    parts: list[Any] = [grid, block, shared_mem, n]
    arrays: list[Any] = []
    for j in pointers:
        if j < n:
            v: Any = args[j]
            if type(v) is not buffer:
                return None
            arrays.append(v)
            parts.append(v.dtype)
            parts.append(v.shape)
    for j in values:
        if j < n:
            v = args[j]
            t = type(v)
            if t not in KEYABLE:
                return None
            parts.append(t)
            parts.append(v)
    if aliasing and len(arrays) > 1:
        if len(arrays) == 2:
            parts.append(overlaps(arrays[0], arrays[1]))
        else:
            parts += overlap_bits(arrays)
    return tuple(parts)


class Tuned:
    """The decision to run entry ``index``'s tuned variant, ready to launch: the compiled
    variant, the tuned geometry, the variant with it (what observers see), the kernel's label,
    ``keyed`` (the positions of the scalars the entry matches by value: the decision's key
    holds their type and value), ``fixed`` (those of them converted once: integers, bools)
    and, once a launch under this decision passed every check, its :class:`~.launcher.FastLaunch`. ``counts``
    is the kernel's :class:`~.report.KernelCounts` once a launch was counted."""

    __slots__ = ("backend", "compiled", "counts", "fast", "fixed", "index", "keyed", "label",
                 "launch", "names", "original", "reusable", "tolerance", "variant")

    def __init__(self, index: int, compiled: Compiled, launch: LaunchConfig, variant: Variant,
                 backend: Backend, label: str, fixed: frozenset[int] = frozenset(),
                 keyed: frozenset[int] = frozenset()) -> None:
        self.index, self.compiled, self.launch, self.variant = index, compiled, launch, variant
        self.backend, self.label, self.fixed, self.keyed = backend, label, fixed, keyed
        self.fast: FastLaunch | None = None
        self.counts: KernelCounts | None = None
        # what the re-verification of the first launch compares with (deploy/reverify.py)
        self.original: Variant | None = None
        self.names: tuple[str, ...] = ()
        self.tolerance: dict[str, Tolerance] = {}
        self.reusable = False  # kept under a key (else decided per launch: nothing prepared)


Decision = Tuned | Reason


class Route:
    """A raw launch key's decision, with the capture source's ``data`` (how it converts the
    arguments) and ``direct``: the one-pass conversion of :func:`~.launcher.direct` (None:
    the two passes of the source and the fast launch), made for a fallback at once, for a
    tuned launch once its fast launch exists."""

    __slots__ = ("data", "decision", "direct", "pending")

    def __init__(self, decision: Decision, data: Any) -> None:
        self.decision, self.data = decision, data
        self.direct: DirectConversion | None = None
        self.pending = True  # direct not tried yet
        self.ready()

    def ready(self) -> None:
        """Make ``direct`` (once): for a fallback now, for a tuned launch when the decision's
        fast launch and counts exist."""
        d = self.decision
        if not self.pending:
            return
        fast = None
        if isinstance(d, Tuned):
            if d.fast is None or d.counts is None:
                return
            fast = d.fast
        self.pending = False
        try:
            self.direct = direct(fast, self.data)
        except Exception:  # noqa: BLE001 - data of another form: the two passes run
            self.direct = None


class Plan:
    """One kernel as built (backend, source, options, defines, signature): its label, the
    candidate entries (or why there are none) and the cache of launch decisions."""

    __slots__ = ("__weakref__", "aliasing", "candidates", "decisions", "defines", "label",
                 "live", "options", "pointers", "route_key", "routes", "signature", "source",
                 "values")

    def __init__(self, source: KernelSource, options: CompileOptions,
                 defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...],
                 label: str, candidates: list[int] | Reason,
                 entries: Sequence[DeployEntry]) -> None:
        self.source, self.options, self.defines = source, options, defines
        self.signature, self.label, self.candidates = signature, label, candidates
        self.decisions: dict[tuple[Any, ...], Decision] = {}
        self.routes: dict[tuple[Any, ...], Route] = {}
        problems = [] if isinstance(candidates, Reason) else \
            [entries[i].problem for i in candidates]
        self.pointers = tuple(j for j, p in enumerate(signature) if p.pointer)
        self.values = tuple(sorted({
            j for pr in problems for j, a in enumerate(pr.args)
            if a.kind == "scalar" and a.value is not None and j < len(signature)
            and not signature[j].pointer}))
        self.aliasing = any(sum(a.kind == "array" for a in pr.args) >= 2 for pr in problems)
        # False once its decider dropped it (Plans.clear): a capture source that kept the
        # plan must look it up again
        self.live = True
        # route_key_loop, as straight-line code (deploy/straight.py) where routes can exist
        loop = partial(_route_key_loop, self.pointers, self.values, self.aliasing)
        self.route_key: Callable[..., tuple[Any, ...] | None] = loop if isinstance(
            candidates, Reason) else straight.route_key(
            len(signature), self.pointers, self.values, self.aliasing,
            {"KEYABLE": KEYABLE, "overlaps": overlaps, "overlap_bits": overlap_bits}, loop)

    def same(self, source: KernelSource, options: CompileOptions,
             defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...]) -> bool:
        return (self.source is source and self.options is options
                and self.signature is signature and self.defines == defines)

    def key(self, event: LaunchEvent) -> tuple[Any, ...]:
        """Everything of this launch that the matching rules read (see the module doc);
        overlaps as one bit per pair of array arguments (the groups follow from them)."""
        args = event.args
        n = len(args)
        launch = event.variant.launch  # its fields: hashed in C, not by the dataclass
        parts: list[Any] = [launch.grid, launch.block, launch.shared_mem, launch.threads, n]
        arrays = [args[j] for j in self.pointers if j < n]
        for v in arrays:
            parts += (type(v), getattr(v, "dtype", None), getattr(v, "shape", None))
        for j in self.values:
            if j < n:
                v = args[j]
                parts += (type(v), v)
        if self.aliasing and len(arrays) > 1:
            parts += overlap_bits(arrays)
        return tuple(parts)

    def route_key_loop(self, grid: Any, block: Any, shared_mem: Any, args: Sequence[Any],
                       buffer: Any) -> tuple[Any, ...] | None:
        """The key of a raw launch (see the module doc), or None when it cannot have one: a
        geometry other than ints and tuples of ints, an array argument not exactly of type
        ``buffer``, a value-matched scalar of a type outside :data:`KEYABLE`. What
        ``route_key(grid, block, shared_mem, args, buffer)`` returns, made by a loop."""
        return _route_key_loop(self.pointers, self.values, self.aliasing, grid, block,
                               shared_mem, args, buffer)

    def learn(self, route: tuple[Any, ...], event: LaunchEvent, data: Any) -> None:
        """Route ``route`` (the raw key of the launch that became ``event``) to the decision
        cached under ``event``'s key, with ``data``; nothing when none is cached."""
        try:
            decision = self.decisions.get(self.key(event))
        except TypeError:
            return
        if decision is None:
            return
        if len(self.routes) >= MAX_DECISIONS:
            self.routes.clear()
        self.routes[route] = Route(decision, data)

    def remember(self, key: tuple[Any, ...], decision: Decision) -> None:
        if len(self.decisions) >= MAX_DECISIONS:
            self.decisions.clear()
            self.routes.clear()  # a route holds a decision cached here
        self.decisions[key] = decision
        if isinstance(decision, Tuned):
            decision.reusable = True


class Plans:
    """Plans by kernel identity: ``(backend, id(source), id(options), id(signature))``, each
    checked against the objects it holds (which also keeps those ids from being reused)."""

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], Plan] = {}

    def get(self, backend: Backend, source: KernelSource, options: CompileOptions,
            defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...]) -> Plan | None:
        plan = self._plans.get((backend, id(source), id(options), id(signature)))
        return plan if plan is not None and plan.same(source, options, defines,
                                                      signature) else None

    def add(self, backend: Backend, plan: Plan) -> Plan:
        if len(self._plans) >= MAX_PLANS:
            self.clear()
        self._plans[backend, id(plan.source), id(plan.options), id(plan.signature)] = plan
        return plan

    def clear(self) -> None:
        """Drop every plan; each is marked no longer live (see :attr:`Plan.live`)."""
        for plan in list(self._plans.values()):
            plan.live = False
        self._plans.clear()
