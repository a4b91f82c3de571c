"""kernforge.deploy: run unchanged applications with their tuned kernels (docs/deploy.md).

- :func:`use` / :func:`stop` / :func:`report`: activate a deployment spec in this process
  (``$KERNFORGE_DEPLOY`` does it when ``kernforge`` is imported);
- :func:`entry_from_recording`, :func:`write_spec`, :func:`read_spec`: the spec format v1;
- :func:`measure_overhead` (what a replaced launch costs the host here) and
  :func:`worth_deploying` (only winners that save more than that per launch).
"""

from .entries import entry_from_event, entry_from_recording
from .overhead import OverheadTable, measure_overhead
from .report import DeployReport, KernelCounts
from .runtime import ENV_VAR, Deployment, current, report, stop, use, use_from_environment
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

__all__ = ["ENV_VAR", "DeployEntry", "DeployReport", "DeploySpec", "DeploySpecError",
           "Deployment", "Dropped", "Evidence", "KernelCounts", "KernelKey", "OverheadTable",
           "Problem", "ProblemArg", "TunedVariant", "current", "entry_from_event",
           "entry_from_recording", "measure_overhead", "not_worth", "read_spec", "report",
           "stop", "use", "use_from_environment", "worth_deploying", "write_spec"]
