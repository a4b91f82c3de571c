"""The frozen core: data model, statuses, errors and the plugin registry (stdlib + numpy).

The names are imported from their modules on first use, so that a module that needs only the
errors (``kernforge run --deploy``, the deployed program's start-up) does not import numpy.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at import: kernforge run and deployed processes

from .lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from .errors import (
        ArgumentError,
        BackendUnavailableError,
        CompileError,
        ConfigError,
        KernelRuntimeError,
        KernforgeError,
        LaunchError,
        PluginNotFoundError,
        RecordingError,
        RecordingFormatError,
        RecordingNotFoundError,
        SignatureError,
        WrongResultError,
    )
    from .measurement import BufferCheck, Measurement
    from .model import CompileOptions, KernelSource, LaunchConfig, Param, Variant
    from .recording import RecordedArg, Recording, Tolerance
    from .registry import Registry
    from .status import Status
    from .unit import Unit

_EXPORTS = {
    "ArgumentError": "errors",
    "BackendUnavailableError": "errors",
    "CompileError": "errors",
    "ConfigError": "errors",
    "KernelRuntimeError": "errors",
    "KernforgeError": "errors",
    "LaunchError": "errors",
    "PluginNotFoundError": "errors",
    "RecordingError": "errors",
    "RecordingFormatError": "errors",
    "RecordingNotFoundError": "errors",
    "SignatureError": "errors",
    "WrongResultError": "errors",
    "BufferCheck": "measurement",
    "Measurement": "measurement",
    "CompileOptions": "model",
    "KernelSource": "model",
    "LaunchConfig": "model",
    "Param": "model",
    "Variant": "model",
    "RecordedArg": "recording",
    "Recording": "recording",
    "Tolerance": "recording",
    "Registry": "registry",
    "Status": "status",
    "Unit": "unit",
}

__all__ = [
    "ArgumentError", "BackendUnavailableError", "BufferCheck", "CompileError", "CompileOptions",
    "ConfigError", "KernelRuntimeError", "KernelSource", "KernforgeError", "LaunchConfig",
    "LaunchError", "Measurement", "Param", "PluginNotFoundError", "RecordedArg", "Recording",
    "RecordingError", "RecordingFormatError", "RecordingNotFoundError", "Registry",
    "SignatureError", "Status", "Tolerance", "Unit", "Variant", "WrongResultError",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
