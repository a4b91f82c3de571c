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
from functools import partial
from typing import Any

from ..backends import Backend, LaunchEvent, cupy_hooks
from ..backends.events import set_substituter
from ..core import CompileOptions, KernelSource, KernforgeError, Param
from . import startup
from .counts import DeployReport, KernelCounts
from .decide import Decider, first_line
from .fastpath import Plan, Route, Tuned
from .gate import refusal
from .launcher import prepare
from .match import COMPILE, EVIDENCE, INTERNAL, LAUNCH, NOT_IN_SPEC, VERIFY, Reason
from .reverify import VERIFY_ENV, Unverifiable, VariantFailed, reverify, verify_mode
from .spec import DeploySpec, PathLike, read_spec
from .specdoc import label_of

log = logging.getLogger("kernforge.deploy")
ENV_VAR = startup.ENV_VAR
_WARN = (COMPILE, LAUNCH, INTERNAL, VERIFY, EVIDENCE)

_state_lock = threading.Lock()
_current: Deployment | None = None
_last: Deployment | None = None


def _tuned_event(d: Tuned, event: LaunchEvent) -> LaunchEvent:
    """What observers see of a tuned launch (made only for them)."""
    return LaunchEvent(event.backend, d.variant, d.compiled.signature, event.args,
                       event.tolerance, event.capture)


class Deployment:
    """An active (or stopped) deployment of one spec; a context manager that stops it.

    ``cache``: decide repeated launches from the cache of :mod:`.fastpath` and launch them
    through :mod:`.launcher` (False: match and check every launch from scratch, as the
    cache's tests compare)."""

    def __init__(self, spec: DeploySpec, *, cache: bool = True,
                 verify: str | None = None) -> None:
        self.cache = cache
        self.verify = verify_mode(verify)  # see deploy/reverify.py
        self._verified: set[int] = set()  # entries whose first launch was re-verified
        self._verify_lock = threading.Lock()
        self._counts: dict[str, KernelCounts] = {}
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._hooked = False
        self.spec = spec

    @property
    def spec(self) -> DeploySpec:
        return self._decider.spec

    @spec.setter
    def spec(self, spec: DeploySpec) -> None:
        """Another spec: every cached lookup, compilation and decision is dropped."""
        name = str(spec.path) if spec.path else "(in-memory spec)"
        previous = self.__dict__.get("_decider")
        if previous is not None:
            previous.retire()
        self._decider = Decider(spec, name, cache=self.cache)
        self._verified = set()
        for i, e in enumerate(spec.entries):  # the producer's rule, checked again here
            ev = e.evidence
            why = refusal(verified=ev.verified, idle=ev.idle, speedup=ev.speedup,
                          ci=ev.speedup_ci, require_ci=False)
            if why is not None:
                log.warning("%s: not deployed: %s", e.kernel.label, why)
                self._decider.failed(i, Reason(EVIDENCE, why))

    @property
    def name(self) -> str:
        return self._decider.name

    def adopt_fallbacks(self, fallbacks: dict[str, int]) -> None:
        """Count launches that ran the original because no entry is for their kernel, as
        :mod:`.startup` counted (and logged) them before this deployment was made."""
        with self._lock:
            for label, n in fallbacks.items():
                c = self._counts.setdefault(label, KernelCounts())
                c.fallback += n
                c.reasons[NOT_IN_SPEC] = c.reasons.get(NOT_IN_SPEC, 0) + n
                self._logged.add((label, NOT_IN_SPEC))

    # ---- the launch substituter -------------------------------------------------------------
    def substitute(self, event: LaunchEvent, launch: Callable[[], Any]
                   ) -> tuple[Callable[[], LaunchEvent], Callable[[], Any]] | None:
        try:
            decision, label = self._decider.decide(event)
        except Exception as exc:  # noqa: BLE001 - a deployment never breaks the application
            v = event.variant
            self._fallback(label_of(v.source, v.options),
                           Reason(INTERNAL, f"{type(exc).__name__}: {exc}"))
            return None
        if isinstance(decision, Reason):
            self._fallback(label, decision)
            return None
        return (partial(_tuned_event, decision, event),
                partial(self._run, decision, event.args, launch))

    def _run(self, d: Tuned, args: tuple[Any, ...], original: Callable[[], Any]) -> Any:
        """The tuned launch: its fast launch when a launch under this decision passed every
        check before and these arguments need nothing more (:mod:`.launcher`), else
        ``Backend.launch`` (which checks everything); the original when it is refused. An
        entry's first launch re-verifies it (:meth:`_first_launch`)."""
        fast = d.fast
        if fast is None and d.index not in self._verified and self.verify != "off":
            handled, result = self._first_launch(d, args, original)
            if handled:
                return result
        try:
            if fast is None or not fast(args):
                d.backend.launch(d.compiled, args, d.launch)
                if fast is None and d.reusable:
                    self._prepare(d, args)
        except Exception as exc:  # noqa: BLE001 - the original runs instead
            return self._refused(d, exc, original)
        counts = d.counts
        if counts is None:
            self._replaced(d)
        else:
            with self._lock:
                counts.replaced += 1
        return None

    def _prepare(self, d: Tuned, args: tuple[Any, ...]) -> None:
        try:
            d.fast = prepare(d.backend, d.compiled, d.launch, args, d.fixed, d.keyed)
        except Exception as exc:  # noqa: BLE001 - later launches take the full path
            log.debug("%s: no fast launch (%s: %s)", d.label, type(exc).__name__, exc)

    def _first_launch(self, d: Tuned, args: tuple[Any, ...], original: Callable[[], Any]
                      ) -> tuple[bool, Any]:
        """Once per entry: the tuned variant on a copy of these arguments, the original on
        the arguments themselves, outputs compared (deploy/reverify.py). (True, the
        original's result) when this launch was handled here; (False, None) when the tuned
        variant should run (verified before, or unverifiable and allowed)."""
        with self._verify_lock:
            if d.index in self._verified:
                return False, None
            try:
                if d.original is None:
                    raise Unverifiable("the original kernel of this launch is unknown")
                why, result = reverify(d.backend, d.compiled, d.launch, args, d.names,
                                       d.tolerance, original)
            except Unverifiable as exc:
                if self.verify == "unverifiable":
                    log.warning("%s: deployed without re-verification (%s)", d.label,
                                exc.message)
                    self._verified.add(d.index)
                    return False, None
                return True, self._refused(d, Reason(VERIFY, (
                    f"cannot be re-verified ({exc.message}); not deployed (set {VERIFY_ENV}"
                    f"=unverifiable to deploy it anyway)")), original)
            except VariantFailed as exc:
                return True, self._refused(d, Reason(VERIFY, exc.message), original)
            if why is not None:
                reason = Reason(VERIFY, f"outputs differ from the original kernel's on this "
                                        f"launch ({why}); not deployed")
                self._decider.failed(d.index, reason)
                self._fallback(d.label, reason)
                return True, result
            self._verified.add(d.index)
            log.info("%s: tuned variant re-verified against the original kernel (which ran "
                     "this first launch)", d.label)
            self._count(d.label, "", False, verified=True)  # not a fallback: the check
            return True, result

    def _refused(self, d: Tuned, exc: BaseException | Reason,
                 original: Callable[[], Any]) -> Any:
        if isinstance(exc, Reason):
            reason = exc
        else:
            detail = first_line(exc.message) if isinstance(exc, KernforgeError) \
                else f"{type(exc).__name__}: {first_line(str(exc))}"
            reason = Reason(LAUNCH, detail)
        self._decider.failed(d.index, reason)  # not tried again, by no cached decision
        self._fallback(d.label, reason)
        return original()

    def covers(self, backend: Backend, source: KernelSource, options: CompileOptions,
               defines: tuple[tuple[str, str], ...]) -> bool:
        """False (and the launch counted as a fallback) when no entry is for this kernel,
        device and build: the capture sources then launch without building an event."""
        try:
            found, label = self._decider.candidates(backend, source, options, defines)
        except Exception as exc:  # noqa: BLE001 - a deployment never breaks the application
            found = Reason(INTERNAL, f"{type(exc).__name__}: {exc}")
            label = label_of(source, options)
        if isinstance(found, Reason):
            self._fallback(label, found)
            return False
        return True

    # ---- routes: raw launches keyed by a capture source (see fastpath.py) -----------------
    def route(self, backend: Backend, source: KernelSource, options: CompileOptions,
              defines: tuple[tuple[str, str], ...], signature: tuple[Param, ...]
              ) -> Plan | None:
        """For a capture source that keys its raw launches (the CuPy hooks): the kernel's
        :class:`~.fastpath.Plan` (what a key holds, the routes) once a launch of it was
        decided from the cache; None otherwise (launches then go through events)."""
        return self._decider.plan(backend, source, options, defines, signature)

    def run_routed(self, plan: Plan, route: Route, args: tuple[Any, ...],
                   launch: Callable[[], Any]) -> Any:
        """Run a launch whose decision a route found, as :meth:`substitute` and
        ``notify_launch`` would have: ``args`` are the event's arguments (converted by the
        capture source as for its event), ``launch`` the original launch."""
        decision = route.decision
        if isinstance(decision, Reason):
            self._fallback(plan.label, decision)
            return launch()
        result = self._run(decision, args, launch)
        if route.pending:
            route.ready()  # the one-pass conversion, once the fast launch exists
        return result

    def run_converted(self, plan: Plan, route: Route, out: list[Any],
                      launch: Callable[[], Any]) -> Any:
        """Run a routed launch whose arguments ``route.direct`` converted (``out``, the
        kernel's), as :meth:`run_routed` would once its fast launch accepted them."""
        decision: Any = route.decision  # a Reason, or a Tuned with its fast launch and counts
        if isinstance(decision, Reason):
            self._fallback(plan.label, decision)
            return launch()
        fast, counts = decision.fast, decision.counts
        try:
            if fast.constants is not None:
                fast.constants(out)
            fast.fire(out)
        except Exception as exc:  # noqa: BLE001 - the original runs instead
            return self._refused(decision, exc, launch)
        with self._lock:
            counts.replaced += 1
        return None

    # ---- counting and logging ---------------------------------------------------------------
    def _count(self, label: str, outcome: str, replaced: bool, verified: bool = False
               ) -> tuple[KernelCounts, bool]:
        """Count one launch (one lock); the kernel's counts, and True the first time this
        kernel has this outcome. ``verified``: the launch that re-verified an entry."""
        with self._lock:
            counts = self._counts.get(label)
            if counts is None:
                counts = self._counts[label] = KernelCounts()
            if verified:
                counts.verified += 1
                return counts, False
            if replaced:
                counts.replaced += 1
            else:
                counts.fallback += 1
                counts.reasons[outcome] = counts.reasons.get(outcome, 0) + 1
            if (label, outcome) in self._logged:
                return counts, False
            self._logged.add((label, outcome))
            return counts, True

    def _fallback(self, label: str, reason: Reason) -> None:
        if self._count(label, reason.category, False)[1]:
            level = logging.WARNING if reason.category in _WARN else logging.INFO
            log.log(level, "%s: runs the original (%s: %s)", label, reason.category,
                    reason.detail)

    def _replaced(self, d: Tuned) -> None:
        """Count the first launch of a decision (logged once per kernel), and keep the
        kernel's counts in the decision: its later launches only add one."""
        counts, first = self._count(d.label, "replaced", True)
        if d.reusable:
            d.counts = counts
        if first:
            e = self.spec.entries[d.index]
            log.info("%s: runs the tuned variant (launch %s; speedup %.3gx measured on %s)",
                     d.label, e.variant.launch.to_json(), e.evidence.speedup,
                     e.evidence.recording)

    def report(self) -> DeployReport:
        with self._lock:
            kernels = {k: KernelCounts(c.replaced, c.fallback, dict(c.reasons), c.verified)
                       for k, c in self._counts.items()}
        return DeployReport(self.name, kernels)

    # ---- activation -------------------------------------------------------------------------
    def start(self, cupy: bool | None = None) -> Deployment:
        """Make this the active deployment (stopping another one); see :func:`use`."""
        global _current
        startup.settle()  # a pending $KERNFORGE_DEPLOY is made first, then replaced
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


def use(spec: DeploySpec | PathLike, *, cupy: bool | None = None,
        verify: str | None = None) -> Deployment:
    """Activate a deployment spec (a :class:`DeploySpec` or the path of one) for every launch
    from now on, until :func:`stop` (or the end of a ``with`` block on the result).

    ``cupy``: install the CuPy hooks (True), never (False), or when the spec has cuda entries
    and CuPy is importable (None). The hooks only see kernels created after they are installed.
    ``verify``: the re-verification of each entry's first launch (:mod:`.reverify`:
    ``require``, the default from ``$KERNFORGE_DEPLOY_VERIFY``, ``unverifiable`` or ``off``).
    Raises :class:`~kernforge.deploy.spec.DeploySpecError` for an unreadable spec."""
    if not isinstance(spec, DeploySpec):
        spec = read_spec(spec)
    return Deployment(spec, verify=verify).start(cupy)


def stop() -> DeployReport | None:
    """Stop the active deployment; returns its report (None when none was active)."""
    startup.settle()
    with _state_lock:
        dep = _current
    return dep.stop() if dep is not None else None


def current() -> Deployment | None:
    startup.settle()
    return _current


def report() -> DeployReport:
    """The counts of the active deployment, else of the last one stopped (else empty)."""
    startup.settle()
    dep = _current or _last
    return dep.report() if dep is not None else DeployReport("", {})


def use_from_environment() -> Deployment | None:
    """Activate ``$KERNFORGE_DEPLOY`` now, in full (``import kernforge`` activates it through
    :func:`.startup.activate`, which defers what it can to the first launch). An unreadable
    spec is logged and warned about; the application then runs unchanged."""
    path = os.environ.get(ENV_VAR, "")
    if not path:
        return None
    try:
        dep = use(path)
    except Exception as exc:  # noqa: BLE001 - the application then runs unchanged
        startup.not_deployed(path, exc)
        return None
    atexit.register(_log_report, dep)
    return dep


def _log_report(dep: Deployment) -> None:
    for line in dep.report().lines():
        log.info("%s", line)
