"""kernforge.deploy: run unchanged applications with their tuned kernels (docs/deploy.md).

- :func:`use` / :func:`stop` / :func:`report`: activate a deployment spec in this process
  (``$KERNFORGE_DEPLOY`` does it when ``kernforge`` is imported, see :mod:`.startup`);
- :func:`entry_from_recording`, :func:`write_spec`, :func:`read_spec`: the spec format v1;
- :func:`measure_overhead` (what a replaced launch costs the host here) and
  :func:`worth_deploying` (only winners that save more than that per launch).

The names are imported from their modules on first use, so that importing this package (which
``$KERNFORGE_DEPLOY`` does in every process) costs next to nothing: docs/deploy.md, "Start-up
cost".
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at import: kernforge run and deployed processes

from ..core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from .counts import DeployReport, KernelCounts
    from .entries import entry_from_event, entry_from_recording
    from .overhead import OverheadTable, measure_overhead
    from .runtime import (
        ENV_VAR,
        Deployment,
        current,
        report,
        stop,
        use,
        use_from_environment,
    )
    from .spec import (
        DeployEntry,
        DeploySpec,
        DeploySpecError,
        Evidence,
        KernelKey,
        Problem,
        ProblemArg,
        TunedVariant,
        read_spec,
        write_spec,
    )
    from .worth import Dropped, not_worth, worth_deploying

_EXPORTS = {
    "entry_from_event": "entries", "entry_from_recording": "entries",
    "OverheadTable": "overhead", "measure_overhead": "overhead",
    "DeployReport": "counts", "KernelCounts": "counts",
    "ENV_VAR": "runtime", "Deployment": "runtime", "current": "runtime", "report": "runtime",
    "stop": "runtime",
    "use": "runtime", "use_from_environment": "runtime",
    "DeployEntry": "spec", "DeploySpec": "spec", "DeploySpecError": "spec",
    "Evidence": "spec", "KernelKey": "spec", "Problem": "spec", "ProblemArg": "spec",
    "TunedVariant": "spec", "read_spec": "spec", "write_spec": "spec",
    "Dropped": "worth", "not_worth": "worth", "worth_deploying": "worth",
}

__all__ = ["ENV_VAR", "DeployEntry", "DeployReport", "DeploySpec", "DeploySpecError",
           "Deployment", "Dropped", "Evidence", "KernelCounts", "KernelKey", "OverheadTable",
           "Problem", "ProblemArg", "TunedVariant", "current", "entry_from_event",
           "entry_from_recording", "measure_overhead", "not_worth", "read_spec", "report",
           "stop", "use", "use_from_environment", "worth_deploying", "write_spec"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
