"""Run an unchanged application with a deployment spec active.

>>> with kernforge.deploy.use("runs/tune-1/deploy.json"):
...     run_simulation()        # matching kernels run their tuned variants
>>> kernforge.deploy.report().lines()
['apply_boundary: 0 replaced, 21 fallback (not in the spec: 21)', 'heat_step: 20 replaced, ...']

A :class:`Deployment` is the launch substituter of :mod:`kernforge.backends.events`: every launch
of a :class:`kernforge.Kernel` and of a CuPy ``RawKernel``/``RawModule`` kernel (through the CuPy
hooks, which first ask :meth:`Deployment.covers` whether the kernel is in the spec at all) is
offered to it. A launch that matches an entry (:mod:`.match`) runs the entry's tuned
variant, compiled by kernforge's backend (once per entry), with the entry's launch geometry and
the application's own arguments; anything else runs the original, unchanged. A tuned variant
that does not compile or launch is logged and the original runs: the application never fails
because of a deployment. The logger ``kernforge.deploy`` says once per kernel and outcome what
happened; :func:`report` counts it.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..backends import Backend, Compiled, LaunchEvent, cupy_hooks
from ..backends.events import set_substituter
from ..core import CompileOptions, KernelSource, KernforgeError, LaunchConfig, Param, Variant
from .entries import code_sha256
from .fastpath import Decision, Plan, Plans, Tuned
from .match import (
    COMPILE,
    INTERNAL,
    LAUNCH,
    NOT_IN_SPEC,
    Reason,
    lookup_key,
    problem_reason,
    static_candidates,
    tuned_launch,
    tuned_variant,
)
from .report import DeployReport, KernelCounts
from .spec import DeploySpec, PathLike, read_spec

log = logging.getLogger("kernforge.deploy")
ENV_VAR = "KERNFORGE_DEPLOY"
_WARN = (COMPILE, LAUNCH, INTERNAL)
_ID_CACHE = 4096

_state_lock = threading.Lock()
_current: Deployment | None = None
_last: Deployment | None = None


def _label_of(source: KernelSource, options: CompileOptions) -> str:
    return str(options.get("name_expression") or "") or source.entry


def _label(event: LaunchEvent) -> str:
    return _label_of(event.variant.source, event.variant.options)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


class Deployment:
    """An active (or stopped) deployment of one spec; a context manager that stops it.

    ``cache``: decide repeated launches from the cache of :mod:`.fastpath` (False: match
    every launch from scratch, as the cache's tests compare)."""

    def __init__(self, spec: DeploySpec, *, cache: bool = True) -> None:
        self.cache = cache
        self._counts: dict[str, KernelCounts] = {}
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._hooked = False
        self.spec = spec

    @property
    def spec(self) -> DeploySpec:
        return self._spec

    @spec.setter
    def spec(self, spec: DeploySpec) -> None:
        """Another spec: every cached lookup, compilation and decision is dropped."""
        index: dict[tuple[Any, ...], list[int]] = {}
        for i, e in enumerate(spec.entries):
            index.setdefault(e.kernel.lookup(), []).append(i)
        with self._lock:
            self._spec, self._index = spec, index
            self._static: dict[tuple[Any, ...], list[int] | Reason] = {}
            self._by_id: dict[tuple[Any, ...], tuple[Any, ...]] = {}
            self._plans = Plans()
            self._variants: dict[tuple[int, LaunchConfig], Variant] = {}
            self._devices: dict[str, dict[str, Any]] = {}
            self._compiled: dict[int, Compiled | Reason] = {}

    @property
    def name(self) -> str:
        return str(self.spec.path) if self.spec.path else "(in-memory spec)"

    # ---- the launch substituter -------------------------------------------------------------
    def substitute(self, event: LaunchEvent, launch: Callable[[], Any]
                   ) -> tuple[Callable[[], LaunchEvent], Callable[[], Any]] | None:
        try:
            decision, label = self._decide(event)
            if isinstance(decision, Reason):
                self._fallback(label, decision)
                return None
        except Exception as exc:  # noqa: BLE001 - a deployment never breaks the application
            self._fallback(_label(event), Reason(INTERNAL, f"{type(exc).__name__}: {exc}"))
            return None
        backend, args = event.backend, event.args

        def tuned_event() -> LaunchEvent:  # what observers see, made only for them
            return LaunchEvent(backend, decision.variant, decision.compiled.signature, args,
                               event.tolerance, event.capture)

        def run_tuned() -> Any:
            try:
                backend.launch(decision.compiled, args, decision.launch)
            except Exception as exc:  # noqa: BLE001 - the original runs instead
                detail = _first_line(exc.message) if isinstance(exc, KernforgeError) \
                    else f"{type(exc).__name__}: {_first_line(str(exc))}"
                reason = Reason(LAUNCH, detail)
                with self._lock:
                    self._compiled[decision.index] = reason  # do not try this entry again
                    self._plans.clear()  # nor decide by a cached decision to try it
                self._fallback(label, reason)
                return launch()
            self._replaced(label, decision.index)
            return None

        return tuned_event, run_tuned

    def covers(self, backend: Backend, source: KernelSource, options: CompileOptions,
               defines: tuple[tuple[str, str], ...]) -> bool:
        """False (and the launch counted as a fallback) when no entry is for this kernel,
        device and build: the capture sources then launch without building an event."""
        try:
            found, label = self._candidates(backend, source, options, defines)
        except Exception as exc:  # noqa: BLE001 - a deployment never breaks the application
            found = Reason(INTERNAL, f"{type(exc).__name__}: {exc}")
            label = _label_of(source, options)
        if isinstance(found, Reason):
            self._fallback(label, found)
            return False
        return True

    def _decide(self, event: LaunchEvent) -> tuple[Decision, str]:
        """The decision for this launch and the kernel's label: from the plan's cache when
        this launch was seen before (see :mod:`.fastpath`), else matched from scratch."""
        if not self.cache:
            return self._decide_uncached(event), _label(event)
        v = event.variant
        plan = self._plans.get(event.backend, v.source, v.options, v.defines, event.signature)
        if plan is None:
            plan = self._plan(event.backend, v.source, v.options, v.defines, event.signature)
        if isinstance(plan.candidates, Reason):
            return plan.candidates, plan.label
        try:
            key = plan.key(event)
            hit = plan.decisions.get(key)
        except TypeError:  # an argument that cannot be hashed: decided without the cache
            return self._decide_uncached(event), plan.label
        if hit is None:
            hit = self._decide_uncached(event)
            plan.remember(key, hit)
        return hit, plan.label

    def _plan(self, backend: Backend, source: KernelSource, options: CompileOptions,
              defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...]) -> Plan:
        candidates, label = self._candidates(backend, source, options, defines)
        plan = Plan(source, options, defines, signature, label, candidates, self.spec.entries)
        return self._plans.add(backend, plan)

    def _decide_uncached(self, event: LaunchEvent) -> Decision:
        """The matching rules applied to this launch (:mod:`.match`), and the tuned launch
        prepared when an entry matches."""
        found = self._find(event)
        if isinstance(found, Reason):
            return found
        index, compiled = found
        cfg = tuned_launch(self.spec.entries[index], event)
        variant = self._variants.get((index, cfg))
        if variant is None:
            variant = self._variants[index, cfg] = replace(compiled.variant, launch=cfg)
        return Tuned(index, compiled, cfg, variant)

    def _find(self, event: LaunchEvent) -> tuple[int, Compiled] | Reason:
        v = event.variant
        candidates, _ = self._candidates(event.backend, v.source, v.options, v.defines)
        if isinstance(candidates, Reason):
            return candidates
        best: Reason | None = None
        for i in candidates:
            reason = problem_reason(self.spec.entries[i], event)
            if reason is None:
                compiled = self._compile(i, event)
                return compiled if isinstance(compiled, Reason) else (i, compiled)
            best = best or reason
        assert best is not None
        return best

    def _candidates(self, backend: Backend, source: KernelSource, options: CompileOptions,
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
        label = _label_of(source, options)
        self._by_id[fast] = (source, options, defines, found, label)
        return found, label

    def _check_static(self, backend: Backend, source: KernelSource, options: CompileOptions,
                      defines: tuple[tuple[str, str], ...]) -> list[int] | Reason:
        key = lookup_key(backend, source, options.as_dict(), code_sha256(source.code))
        indices = self._index.get(key)
        if not indices:
            return Reason(NOT_IN_SPEC, f"no entry for this kernel in {self.name}")
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
            result = Reason(COMPILE, _first_line(exc.message))
        except Exception as exc:  # noqa: BLE001 - never crash the application
            result = Reason(COMPILE, f"{type(exc).__name__}: {exc}")
        with self._lock:
            return self._compiled.setdefault(index, result)

    # ---- counting and logging ---------------------------------------------------------------
    def _count(self, label: str, outcome: str, replaced: bool) -> bool:
        """Count one launch (one lock); True the first time this kernel has this outcome."""
        with self._lock:
            counts = self._counts.get(label)
            if counts is None:
                counts = self._counts[label] = KernelCounts()
            if replaced:
                counts.replaced += 1
            else:
                counts.fallback += 1
                counts.reasons[outcome] = counts.reasons.get(outcome, 0) + 1
            if (label, outcome) in self._logged:
                return False
            self._logged.add((label, outcome))
            return True

    def _fallback(self, label: str, reason: Reason) -> None:
        if self._count(label, reason.category, False):
            level = logging.WARNING if reason.category in _WARN else logging.INFO
            log.log(level, "%s: runs the original (%s: %s)", label, reason.category,
                    reason.detail)

    def _replaced(self, label: str, index: int) -> None:
        if self._count(label, "replaced", True):
            e = self.spec.entries[index]
            log.info("%s: runs the tuned variant (launch %s; speedup %.3gx measured on %s)",
                     label, e.variant.launch.to_json(), e.evidence.speedup,
                     e.evidence.recording)

    def report(self) -> DeployReport:
        with self._lock:
            kernels = {k: KernelCounts(c.replaced, c.fallback, dict(c.reasons))
                       for k, c in self._counts.items()}
        return DeployReport(self.name, kernels)

    # ---- activation -------------------------------------------------------------------------
    def start(self, cupy: bool | None = None) -> Deployment:
        """Make this the active deployment (stopping another one); see :func:`use`."""
        global _current
        with _state_lock:
            previous, _current = _current, self
        if previous is not None and previous is not self:
            log.info("deployment of %s replaced by %s", previous.name, self.name)
            previous._release()
        self._hooked = self._hooked or _install_cupy_hooks(self.spec, cupy)
        set_substituter(self)
        log.info("deploying %d tuned kernel launch(es) from %s", len(self.spec.entries),
                 self.name)
        return self

    def stop(self) -> DeployReport:
        """Stop substituting launches (and remove the CuPy hooks if :meth:`start` installed
        them); returns the report."""
        global _current, _last
        with _state_lock:
            if _current is self:
                set_substituter(None)
                _current = None
            _last = self
        self._release()
        return self.report()

    def _release(self) -> None:
        if self._hooked:
            cupy_hooks.uninstall()
            self._hooked = False

    def __enter__(self) -> Deployment:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _install_cupy_hooks(spec: DeploySpec, cupy: bool | None) -> bool:
    """Install the CuPy hooks: when asked, or (``None``) when the spec has cuda entries and
    CuPy is importable. Returns True when they were installed here."""
    if cupy is False or (cupy is None and not any(e.kernel.backend == "cuda"
                                                  for e in spec.entries)):
        return False
    if "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
        log.warning("the spec has cuda entries but CuPy is not importable: CuPy kernels "
                    "cannot be replaced")
        return False
    try:
        return cupy_hooks.install()
    except Exception as exc:  # noqa: BLE001 - a broken CuPy must not stop the application
        log.warning("cannot hook CuPy (%s: %s): CuPy kernels run unchanged",
                    type(exc).__name__, exc)
        return False


def use(spec: DeploySpec | PathLike, *, cupy: bool | None = None) -> Deployment:
    """Activate a deployment spec (a :class:`DeploySpec` or the path of one) for every launch
    from now on, until :func:`stop` (or the end of a ``with`` block on the result).

    ``cupy``: install the CuPy hooks (True), never (False), or when the spec has cuda entries
    and CuPy is importable (None). The hooks only see kernels created after they are installed.
    Raises :class:`~kernforge.deploy.spec.DeploySpecError` for an unreadable spec."""
    if not isinstance(spec, DeploySpec):
        spec = read_spec(spec)
    return Deployment(spec).start(cupy)


def stop() -> DeployReport | None:
    """Stop the active deployment; returns its report (None when none was active)."""
    with _state_lock:
        dep = _current
    return dep.stop() if dep is not None else None


def current() -> Deployment | None:
    return _current


def report() -> DeployReport:
    """The counts of the active deployment, else of the last one stopped (else empty)."""
    dep = _current or _last
    return dep.report() if dep is not None else DeployReport("", {})


def use_from_environment() -> Deployment | None:
    """Activate ``$KERNFORGE_DEPLOY`` (called by ``import kernforge`` when it is set). An
    unreadable spec is logged and warned about; the application then runs unchanged."""
    path = os.environ.get(ENV_VAR, "")
    if not path:
        return None
    try:
        dep = use(path)
    except Exception as exc:  # noqa: BLE001 - the application then runs unchanged
        import warnings

        if not isinstance(exc, KernforgeError):
            exc = KernforgeError(f"{type(exc).__name__}: {exc}")
        log.error("%s=%s not deployed: %s", ENV_VAR, path, exc)
        warnings.warn(f"kernforge: {ENV_VAR}={path} not deployed: {exc}", RuntimeWarning,
                      stacklevel=2)
        return None
    atexit.register(_log_report, dep)
    return dep


def _log_report(dep: Deployment) -> None:
    for line in dep.report().lines():
        log.info("%s", line)
