"""The decisions of one deployment spec: which entry (if any) a launch runs, with the caches.

A :class:`Decider` holds one spec and everything derived from it: the entries by kernel lookup
key, per kernel as built (source, options, ``#define``s) the candidate entries for this device
and build (:func:`~.match.static_candidates`), the :class:`~.fastpath.Plan` of each kernel
with its cached launch decisions, the tuned variants compiled by the backend, and the entries
whose tuned variant failed (never tried again). A deployment makes a new one when its spec
changes, which drops every cached decision.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import numpy as np

from ..backends import Backend, Compiled, LaunchEvent
from ..core import CompileOptions, KernelSource, KernforgeError, LaunchConfig, Param, Variant
from .entries import VALUE_KINDS, code_sha256
from .fastpath import Decision, Plan, Plans, Tuned
from .match import (
    COMPILE,
    NOT_IN_SPEC,
    Reason,
    lookup_key,
    problem_reason,
    static_candidates,
    tuned_launch,
    tuned_variant,
)
from .spec import DeploySpec
from .specdoc import label_of, no_entry

_ID_CACHE = 4096


def _kind(dtype: str) -> str:
    try:
        return str(np.dtype(dtype).kind)
    except TypeError:
        return ""


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


class Decider:
    """Matches launches against one spec (:mod:`.match`), caching what it can
    (:mod:`.fastpath`); ``cache=False`` matches every launch from scratch."""

    def __init__(self, spec: DeploySpec, name: str, *, cache: bool = True) -> None:
        self.spec, self.name, self.cache = spec, name, cache
        self._index: dict[tuple[Any, ...], list[int]] = {}
        for i, e in enumerate(spec.entries):
            self._index.setdefault(e.kernel.lookup(), []).append(i)
        self._lock = threading.Lock()
        self._static: dict[tuple[Any, ...], list[int] | Reason] = {}
        self._by_id: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._plans = Plans()
        self._variants: dict[tuple[int, LaunchConfig], Variant] = {}
        self._devices: dict[str, dict[str, Any]] = {}
        self._compiled: dict[int, Compiled | Reason] = {}

    def decide(self, event: LaunchEvent) -> tuple[Decision, str]:
        """The decision for this launch and the kernel's label: from the plan's cache when
        this launch was seen before (see :mod:`.fastpath`), else matched from scratch."""
        v = event.variant
        if not self.cache:
            return self.decide_uncached(event), label_of(v.source, v.options)
        plan = self._plans.get(event.backend, v.source, v.options, v.defines, event.signature)
        if plan is None:
            candidates, label = self.candidates(event.backend, v.source, v.options, v.defines)
            plan = self._plans.add(event.backend, Plan(
                v.source, v.options, v.defines, event.signature, label, candidates,
                self.spec.entries))
        if isinstance(plan.candidates, Reason):
            return plan.candidates, plan.label
        try:
            key = plan.key(event)
            hit = plan.decisions.get(key)
        except TypeError:  # an argument that cannot be hashed: decided without the cache
            return self.decide_uncached(event), plan.label
        if hit is None:
            hit = self.decide_uncached(event, plan.values)
            plan.remember(key, hit)
        return hit, plan.label

    def plan(self, backend: Backend, source: KernelSource, options: CompileOptions,
             defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...]
             ) -> Plan | None:
        """This kernel's plan when decisions are cached, one exists (a launch was decided)
        and the kernel has candidate entries; else None."""
        if not self.cache:
            return None
        plan = self._plans.get(backend, source, options, defines, signature)
        return None if plan is None or isinstance(plan.candidates, Reason) else plan

    def decide_uncached(self, event: LaunchEvent, keyed: tuple[int, ...] = ()) -> Decision:
        """The matching rules applied to this launch (:mod:`.match`), and the tuned launch
        prepared when an entry matches; ``keyed``: the scalar positions the decision's cache
        key holds by type and value (see :class:`~.fastpath.Plan`)."""
        v = event.variant
        candidates, label = self.candidates(event.backend, v.source, v.options, v.defines)
        if isinstance(candidates, Reason):
            return candidates
        best: Reason | None = None
        for i in candidates:
            reason = problem_reason(self.spec.entries[i], event)
            if reason is None:
                compiled = self._compile(i, event)
                if isinstance(compiled, Reason):
                    return compiled
                return self._tuned(i, compiled, event, label, keyed)
            best = best or reason
        assert best is not None
        return best

    def _tuned(self, index: int, compiled: Compiled, event: LaunchEvent, label: str,
               keyed: tuple[int, ...]) -> Tuned:
        entry = self.spec.entries[index]
        cfg = tuned_launch(entry, event)
        variant = self._variants.get((index, cfg))
        if variant is None:
            variant = self._variants[index, cfg] = replace(compiled.variant, launch=cfg)
        by_value = frozenset(j for j in keyed if entry.problem.args[j].value is not None)
        # integers and bools: equal (type, value) in the key convert to the same value; a
        # float may be -0.0 under the key of 0.0, so it is converted at every launch
        fixed = frozenset(j for j in by_value if _kind(entry.problem.args[j].dtype) in
                          VALUE_KINDS)
        tuned = Tuned(index, compiled, cfg, variant, event.backend, label, fixed, by_value)
        tuned.original, tuned.tolerance = event.variant, dict(event.tolerance)
        tuned.names = tuple(p.name for p in event.signature)
        return tuned

    def candidates(self, backend: Backend, source: KernelSource, options: CompileOptions,
                   defines: tuple[tuple[str, str], ...]) -> tuple[list[int] | Reason, str]:
        """Entries for this kernel, device and build, and the kernel's label; cached by value,
        and by identity for the objects a kernel passes on every launch (hashing a source
        costs more)."""
        fast = (backend.name, id(source), id(options))
        hit = self._by_id.get(fast)
        if hit is not None and hit[0] is source and hit[1] is options and hit[2] == defines:
            return hit[3], hit[4]
        key = (backend.name, source, options, defines)
        found = self._static.get(key)
        if found is None:
            found = self._static[key] = self._check_static(backend, source, options, defines)
        if len(self._by_id) >= _ID_CACHE:
            self._by_id.clear()
        label = label_of(source, options)
        self._by_id[fast] = (source, options, defines, found, label)
        return found, label

    def _check_static(self, backend: Backend, source: KernelSource, options: CompileOptions,
                      defines: tuple[tuple[str, str], ...]) -> list[int] | Reason:
        key = lookup_key(backend, source, options.as_dict(), code_sha256(source.code))
        indices = self._index.get(key)
        if not indices:
            return Reason(NOT_IN_SPEC, no_entry(self.name))
        if backend.name not in self._devices:
            self._devices[backend.name] = backend.deploy_identity()
        return static_candidates([(i, self.spec.entries[i]) for i in indices],
                                 self._devices[backend.name], backend, options, defines)

    def _compile(self, index: int, event: LaunchEvent) -> Compiled | Reason:
        with self._lock:
            hit = self._compiled.get(index)
        if hit is not None:
            return hit
        result: Compiled | Reason
        try:  # the tuned variant was verified by tuning, under the recording's tolerances
            variant = tuned_variant(self.spec.entries[index], event.variant.source)
            result = event.backend.compile(variant, tolerant=True)
        except KernforgeError as exc:
            result = Reason(COMPILE, first_line(exc.message))
        except Exception as exc:  # noqa: BLE001 - never crash the application
            result = Reason(COMPILE, f"{type(exc).__name__}: {exc}")
        with self._lock:
            return self._compiled.setdefault(index, result)

    def retire(self) -> None:
        """This decider is replaced: its plans are no longer live (routes kept by a capture
        source are looked up again, from the new one)."""
        with self._lock:
            self._plans.clear()

    def failed(self, index: int, reason: Reason) -> None:
        """The tuned launch of entry ``index`` was refused: it is not tried again, and no
        cached decision runs it."""
        with self._lock:
            self._compiled[index] = reason
            self._plans.clear()
