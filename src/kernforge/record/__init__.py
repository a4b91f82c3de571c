"""kernforge.record: capture kernel launches and read/write recording format v1.

See docs/recording-format.md for the on-disk format and docs/recording-cupy.md for CuPy
applications.
"""

from .capture import Recorder, install_cupy_hooks, record, uninstall_cupy_hooks
from .format import clean_partial, find_recordings, load_recording, write_recording

__all__ = ["Recorder", "clean_partial", "find_recordings", "install_cupy_hooks",
           "load_recording", "record", "uninstall_cupy_hooks", "write_recording"]
