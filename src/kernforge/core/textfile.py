"""A text file the user names (a candidate's source, a file to lint), read as UTF-8: a file
that cannot be read, or is not UTF-8 (a Latin-1 comment in old HPC code), is a ConfigError
naming the file and what to do, not a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError


def read_text_file(path: str | os.PathLike[str], hint: str) -> str:
    """The file's text; ``hint`` says what file was expected where it cannot be read."""
    p = Path(path)
    try:
        return p.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {p}: it is not UTF-8 text (byte "
                          f"{exc.object[exc.start]:#04x} at offset {exc.start})",
                          hint=f"save it as UTF-8, e.g. iconv -f latin1 -t utf-8 {p} > "
                               f"{p.stem}.utf8{p.suffix}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc}", hint=hint) from None
