"""kernforge: record the kernels of a real run, search faster variants on isolated replays,
deploy the winners, and prove every speedup it reports.

The public API is re-exported here: ``record`` and ``replay`` eagerly (see below), everything
else lazily on first use, so ``import kernforge`` loads no optional heavy dependency (CuPy,
Optuna, Dask, the LLM client).
"""

from __future__ import annotations

import importlib
import os as _os
from typing import Any

from ._version import __version__

_EXPORTS = {
    "Kernel": "kernforge.backends.kernel",
    "get_backend": "kernforge.backends.base",
    "load_recording": "kernforge.record.format",
    "find_recordings": "kernforge.record.format",
    "compare": "kernforge.replay.engine",
    "Status": "kernforge.core",
    "KernelSource": "kernforge.core",
    "LaunchConfig": "kernforge.core",
    "CompileOptions": "kernforge.core",
    "Variant": "kernforge.core",
    "Recording": "kernforge.core",
    "Measurement": "kernforge.core",
    "Tolerance": "kernforge.core",
    "KernforgeError": "kernforge.core",
    "OperatorKernel": "kernforge.apps.operators",
    "apply_stencil": "kernforge.apps.operators",
}

__all__ = ["__version__", "deploy", "record", "replay", *_EXPORTS.keys()]  # noqa: PLE0604

# ``record`` and ``replay`` are both subpackages and the functions users call. Importing a
# subpackage binds its name on this package, which would shadow a lazy export, so these two are
# bound eagerly, after their subpackages are imported.
from .record.capture import record
from .replay.engine import replay


def __getattr__(name: str) -> Any:
    if name == "deploy":  # the subpackage (kernforge.deploy.use, ...), imported on first use
        return importlib.import_module("kernforge.deploy")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kernforge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


# A deployment spec named by the environment is activated when kernforge is imported
# (docs/deploy.md); without the variable nothing of kernforge.deploy is imported. With it, the
# spec is checked here and the rest waits for a launch (deploy/startup.py: every process pays
# for this). Whatever goes wrong there is warned about and the application runs unchanged.
if _os.environ.get("KERNFORGE_DEPLOY"):
    try:
        from .deploy.startup import activate as _activate

        _activate()
    except Exception as _exc:  # noqa: BLE001 - a deployment never breaks the application
        import warnings as _warnings

        _warnings.warn(f"kernforge: KERNFORGE_DEPLOY={_os.environ['KERNFORGE_DEPLOY']} not "
                       f"deployed: {type(_exc).__name__}: {_exc}", RuntimeWarning, stacklevel=2)
