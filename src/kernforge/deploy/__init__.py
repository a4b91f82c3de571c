"""kernforge.deploy: run unchanged applications with their tuned kernels (docs/deploy.md).

- :func:`use` / :func:`stop` / :func:`report`: activate a deployment spec in this process
  (``$KERNFORGE_DEPLOY`` does it when ``kernforge`` is imported);
- :func:`entry_from_recording`, :func:`write_spec`, :func:`read_spec`: the spec format v1.
"""

from .entries import entry_from_recording
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

__all__ = ["ENV_VAR", "DeployEntry", "DeployReport", "DeploySpec", "DeploySpecError",
           "Deployment", "Evidence", "KernelCounts", "KernelKey", "Problem", "ProblemArg",
           "TunedVariant", "current", "entry_from_recording", "read_spec", "report", "stop",
           "use", "use_from_environment", "write_spec"]
