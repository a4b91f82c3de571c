"""kernforge: record the kernels of a real run, search faster variants on isolated replays,
deploy the winners, and prove every speedup it reports.

The public API is re-exported here: ``record`` and ``replay`` eagerly (see below), everything
else lazily on first use, so ``import kernforge`` loads no optional heavy dependency (CuPy,
Optuna, Dask, the LLM client).
"""

from __future__ import annotations

import os as _os
import sys as _sys

from ._version import __version__

# no ``typing``, ``types`` or ``importlib`` at import: every process deployed through
# $KERNFORGE_DEPLOY and every ``kernforge run`` imports this module first
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from types import ModuleType as _ModuleType
    from typing import Any

    from .record.capture import record
    from .replay.engine import replay
else:
    _ModuleType = type(_sys)

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

# ``record`` and ``replay`` are both subpackages and the functions users call; both are imported
# on first use too (``import kernforge`` then costs no numpy: ``kernforge run --deploy`` and every
# deployed process pay for it). Importing a subpackage binds its name on its parent package;
# :class:`_Package` keeps these two names for the functions.
_FUNCTIONS = {"record": "kernforge.record.capture", "replay": "kernforge.replay.engine"}


class _Package(_ModuleType):
    """This package's module type: a subpackage ``record`` / ``replay`` being imported does
    not shadow the function of that name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS and isinstance(value, _ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    import importlib

    if name == "deploy":  # the subpackage (kernforge.deploy.use, ...), imported on first use
        return importlib.import_module("kernforge.deploy")
    if name in _FUNCTIONS:
        value = getattr(importlib.import_module(_FUNCTIONS[name]), name)
        globals()[name] = value  # the next lookup finds it directly
        return value
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
