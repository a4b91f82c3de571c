"""``$KERNFORGE_DEPLOY``: the activation at ``import kernforge``, paid for when first needed.

Every process of a program deployed through its environment imports kernforge, so the work
done at start-up is kept to the checks that say whether the spec may be deployed at all:
:func:`~.specdoc.load_document` reads the file and checks its format, version, checksum and
entries' keys (an unreadable or edited spec is logged and warned about here, at start-up, and
the program runs unchanged). What is left waits for a launch: a :class:`Pending` deployment is
installed as the launch substituter. A launch of a kernel that no entry is for (the lookup key
of :mod:`.specdoc`: backend, language, entry point, sha256 of the code, name expression) is
counted as a ``not in the spec`` fallback here, as :class:`~.runtime.Deployment` counts it;
the first launch of a kernel that an entry is for builds the spec's entries and the
:class:`~.runtime.Deployment` (evidence gate, matching, re-verification, ...), which takes over
the counts and every launch from then on. A spec whose kernels never launch costs the file's
checks and nothing more. A spec with cuda entries is activated at once (the CuPy hooks only
see kernels created after they are installed). Any function of :mod:`.runtime`
(``current``, ``report``, ``stop``, ``use``) first completes a pending activation
(:func:`settle`), so the API sees the deployment as if it had been made at start-up.
``kernforge run --deploy`` deploys its spec the same way (:func:`install`), so that an
application started through it pays no more than one started with ``$KERNFORGE_DEPLOY``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import events
from .specdoc import (
    NOT_IN_SPEC,
    code_sha256,
    entry_lookup,
    is_interposer_lines,
    label_of,
    load_document,
    lookup_key,
    no_entry,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..backends import Backend, LaunchEvent
    from ..core import CompileOptions, KernelSource
    from .counts import DeployReport
    from .runtime import Deployment

ENV_VAR = "KERNFORGE_DEPLOY"
_ID_CACHE = 4096
_pending: Pending | None = None


def _log(level: int, msg: str, *args: Any) -> None:
    """Log on ``kernforge.deploy``; INFO and below only when the program imported logging
    (else no handler could show them), so that logging is not imported at start-up."""
    if level > 20 or "logging" in sys.modules:
        import logging

        logging.getLogger("kernforge.deploy").log(level, msg, *args)


def not_deployed(path: str, exc: BaseException, stacklevel: int = 2, *,
                 what: str | None = None) -> None:
    """Log and warn that the spec of ``$KERNFORGE_DEPLOY`` is not deployed (the program then
    runs unchanged); ``what``: the name of a spec that ``kernforge run --deploy`` deploys,
    said once, on its log, and not warned about."""
    import warnings

    from ..core import KernforgeError

    if not isinstance(exc, KernforgeError):
        exc = KernforgeError(f"{type(exc).__name__}: {exc}")
    _log(40, "%s not deployed: %s", what or f"{ENV_VAR}={path}", exc)
    if what is not None:
        return
    warnings.warn(f"kernforge: {ENV_VAR}={path} not deployed: {exc}", RuntimeWarning,
                  stacklevel=stacklevel + 1)


class Pending:
    """The launch substituter of a spec checked at start-up whose deployment is not made yet
    (see the module docstring). Never raises. ``verify`` and ``cupy``: as for
    :func:`~.runtime.use`, for the deployment when it is made; ``what``: see
    :func:`not_deployed`."""

    def __init__(self, path: Path, doc: dict[str, Any], *, verify: str | None = None,
                 cupy: bool | None = None, what: str | None = None) -> None:
        self.path, self.doc, self.name = path, doc, str(path)
        self.verify, self.cupy, self.what = verify, cupy, what
        self.stopped = False
        self.keys = {entry_lookup(e["kernel"]) for e in doc["entries"]
                     if isinstance(e["kernel"], dict) and _has_lookup(e["kernel"])}
        self.complete = len(self.keys) == len(doc["entries"])  # else: every kernel may match
        self.deployment: Deployment | None = None
        self.failed = False
        self.fallbacks: dict[str, int] = {}  # label -> launches counted "not in the spec"
        self._lock = threading.RLock()
        self._by_id: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _in_spec(self, backend: Backend, source: KernelSource, options: CompileOptions
                 ) -> bool:
        fast = (backend.name, id(source), id(options))
        hit = self._by_id.get(fast)
        if hit is not None and hit[0] is source and hit[1] is options:
            return bool(hit[2])
        key = lookup_key(backend.name, source.language, source.entry,
                         code_sha256(source.code), options.as_dict())
        found = not self.complete or key in self.keys
        if len(self._by_id) >= _ID_CACHE:
            self._by_id.clear()
        self._by_id[fast] = (source, options, found)
        return found

    def covers(self, backend: Backend, source: KernelSource, options: CompileOptions,
               defines: tuple[tuple[str, str], ...]) -> bool:
        dep = self.deployment
        if dep is None and not self.failed:
            try:
                if not self._in_spec(backend, source, options):
                    return self._not_in_spec(label_of(source, options), backend, source,
                                             options, defines)
            except Exception:  # noqa: BLE001, S110 - the deployment decides (and counts) it
                pass
            dep = self.materialize()
        return dep.covers(backend, source, options, defines) if dep is not None else False

    def _not_in_spec(self, label: str, *args: Any) -> bool:
        with self._lock:
            dep = self.deployment
            if dep is None:
                n = self.fallbacks.get(label, 0)
                self.fallbacks[label] = n + 1
        if dep is not None:  # made meanwhile, by another thread
            return dep.covers(*args)
        if n == 0:
            _log(20, "%s: runs the original (%s: %s)", label, NOT_IN_SPEC, no_entry(self.name))
        return False

    def substitute(self, event: LaunchEvent, launch: Callable[[], Any]) -> Any:
        dep = self.deployment or (None if self.failed else self.materialize())
        return dep.substitute(event, launch) if dep is not None else None

    def materialize(self) -> Deployment | None:
        """Build the spec's entries and its :class:`~.runtime.Deployment`, hand it the counts
        and start it (once); None when an entry is malformed (logged and warned about; the
        program runs unchanged)."""
        with self._lock:
            if self.deployment is not None or self.failed or self.stopped:
                return self.deployment
            try:
                from .runtime import Deployment
                from .spec import spec_from_document

                dep = Deployment(spec_from_document(self.path, self.doc), verify=self.verify)
                dep.adopt_fallbacks(self.fallbacks)
                self.deployment = dep
                dep.start(self.cupy)
            except Exception as exc:  # noqa: BLE001 - the program then runs unchanged
                self.failed = True
                self.deployment = None
                if events.substituter() is self:
                    events.set_substituter(None)
                not_deployed(self.name, exc, what=self.what)
            return self.deployment

    def report(self) -> DeployReport:
        from .counts import DeployReport, KernelCounts

        if self.deployment is not None:
            return self.deployment.report()
        with self._lock:
            return DeployReport(self.name, {k: KernelCounts(0, n, {NOT_IN_SPEC: n})
                                            for k, n in self.fallbacks.items()})

    def stop(self) -> DeployReport:
        """Stop substituting launches (and the deployment, if it was made); the report."""
        with self._lock:
            self.stopped = True
            dep = self.deployment
        if dep is not None:
            return dep.stop()
        if events.substituter() is self:
            events.set_substituter(None)
        return self.report()

    def at_exit(self) -> None:
        """The report, logged at INFO when the process exits (as for a deployment made at
        start-up)."""
        if "logging" in sys.modules:
            for line in self.report().lines():
                _log(20, "%s", line)


def _has_lookup(kernel: dict[str, Any]) -> bool:
    return all(k in kernel for k in ("backend", "language", "entry", "code_sha256",
                                     "name_expression"))


def activate() -> Pending | None:
    """Check the spec of ``$KERNFORGE_DEPLOY`` and install its :class:`Pending` deployment
    (called by ``import kernforge`` when the variable is set); None, logged and warned about,
    when the spec cannot be deployed; None without a word when the variable names the line
    file of a native deployment (the interposer preloaded into this process deploys it)."""
    path = os.environ.get(ENV_VAR, "")
    if not path or is_interposer_lines(Path(path)):  # a native deployment: the interposer's
        return None
    try:
        pending = Pending(Path(path), load_document(Path(path)))
    except Exception as exc:  # noqa: BLE001 - the program then runs unchanged
        not_deployed(path, exc)
        return None
    install(pending)
    atexit.register(pending.at_exit)
    if has_cuda_entries(pending.doc):
        pending.materialize()  # the CuPy hooks, before the program makes its kernels
    return pending


def has_cuda_entries(doc: dict[str, Any]) -> bool:
    """Whether a checked spec document has entries for CuPy kernels (backend cuda)."""
    return any(isinstance(e["kernel"], dict) and e["kernel"].get("backend") == "cuda"
               for e in doc["entries"])


def install(pending: Pending) -> Pending:
    """Make ``pending`` the launch substituter and the activation that :func:`settle`
    completes (``$KERNFORGE_DEPLOY``, or ``kernforge run --deploy``)."""
    global _pending
    _pending = pending
    events.set_substituter(pending)
    return pending


def settle() -> None:
    """Complete the pending activation (:func:`install`) if it is still the launch
    substituter (called by :mod:`.runtime` before it reads or changes the active
    deployment)."""
    pending = _pending
    if pending is None or pending.deployment is not None or pending.failed:
        return
    if id(events.substituter()) == id(pending):  # not replaced meanwhile
        pending.materialize()
