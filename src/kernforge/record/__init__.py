"""kernforge.record: capture kernel launches and read/write recording format v1.

See docs/recording-format.md for the on-disk format.
"""

from .capture import Recorder, record
from .format import clean_partial, find_recordings, load_recording, write_recording

__all__ = ["Recorder", "clean_partial", "find_recordings", "load_recording", "record",
           "write_recording"]
