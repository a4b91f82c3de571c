"""The frozen core: data model, statuses, errors and the plugin registry (stdlib + numpy)."""

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

__all__ = [
    "ArgumentError", "BackendUnavailableError", "BufferCheck", "CompileError", "CompileOptions",
    "ConfigError", "KernelRuntimeError", "KernelSource", "KernforgeError", "LaunchConfig",
    "LaunchError", "Measurement", "Param", "PluginNotFoundError", "RecordedArg", "Recording",
    "RecordingError", "RecordingFormatError", "RecordingNotFoundError", "Registry",
    "SignatureError", "Status", "Tolerance", "Variant", "WrongResultError",
]
