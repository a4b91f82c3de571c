"""kernforge.record: capture kernel launches, read/write recording format v1, read any unit.

See docs/recording-format.md for the on-disk format and docs/recording-cupy.md for CuPy
applications. The names are imported from their modules on first use (``kernforge run
--deploy`` needs the interposer alone, not the capture).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at import: kernforge run and deployed processes

from ..core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from .capture import Recorder, install_cupy_hooks, record, uninstall_cupy_hooks
    from .format import clean_partial, find_recordings, load_recording, write_recording
    from .units import read_unit

_EXPORTS = {"Recorder": "capture", "install_cupy_hooks": "capture", "record": "capture",
            "uninstall_cupy_hooks": "capture", "clean_partial": "format",
            "find_recordings": "format", "load_recording": "format", "write_recording": "format",
            "read_unit": "units"}

__all__ = ["Recorder", "clean_partial", "find_recordings", "install_cupy_hooks",
           "load_recording", "read_unit", "record", "uninstall_cupy_hooks", "write_recording"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
