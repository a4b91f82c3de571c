"""One recorded unit read from disk, whichever format it was written in: a recording (format
v1, :mod:`.format`) or a launch the driver interposer recorded (format v2,
:mod:`.native_format`). The manifest says which; the caller gets a :class:`~kernforge.core.Unit`
either way."""

from __future__ import annotations

from ..core import Unit
from .format import PathLike, load_recording
from .native_format import is_native_unit, read_native


def read_unit(path: PathLike, *, verify: bool = False) -> Unit:
    """The unit at ``path``; ``verify``: every blob hash-checked now. A damaged unit is a
    RecordingError naming what is wrong."""
    if is_native_unit(path):
        return read_native(path, verify=verify)
    return load_recording(path, verify=verify)
