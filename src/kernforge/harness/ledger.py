"""Persisted integrity records: the prior-best baseline per case, and the ledger.

``BaselineStore`` -- one JSON file (format ``kernforge-baselines``, version 1) mapping a case id
and a device to the best accepted result there: speedup over the recorded kernel, median seconds, variant key,
device, date. Read-modify-write under an exclusive lock (``<file>.lock``), written atomically
(temporary file, fsync, rename). The zero-regression gate compares *speedups* measured
interleaved against the recorded kernel in the same session, not absolute times from
different sessions (those drift); a prior best from another device does not apply.

``Ledger`` -- JSONL, append-only: one line per validated candidate (accepted, downgraded or
rejected) with its Status, reason code and message, each line written with one ``write`` on an
``O_APPEND`` descriptor under a lock and fsynced. Rejected candidates are kept next to the
accepted ones; nothing is ever rewritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError

BASELINE_FORMAT = "kernforge-baselines"
BASELINE_VERSION = 1
DEFAULT_BAND = 0.02


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON into ``path`` atomically (temporary sibling, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class RegressionCheck:
    """The zero-regression gate: ``passed`` unless ``speedup < prior * (1 - band)``."""

    passed: bool
    speedup: float
    prior: float
    band: float
    prior_source: str  # "store" or "recorded kernel"
    improved: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BaselineStore:
    """The prior best per case (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "cases": {}}
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, not UTF-8
            raise ConfigError(f"baseline store {self.path} is unreadable: {exc}",
                              hint="restore it from version control, or remove it to start "
                                   "over") from exc
        if data.get("format") != BASELINE_FORMAT or data.get("version") != BASELINE_VERSION:
            raise ConfigError(f"{self.path} is not a kernforge baseline store (version "
                              f"{BASELINE_VERSION})", hint="point --baseline at such a file")
        return data

    def get(self, case: str, device: str) -> dict[str, Any] | None:
        entry = self._read()["cases"].get(case, {}).get(device)
        return dict(entry) if entry else None

    def check(self, case: str, device: str, speedup: float, *, band: float = DEFAULT_BAND,
              record: dict[str, Any] | None = None, upper: float | None = None,
              improve: bool = True) -> RegressionCheck:
        """Gate ``speedup`` against the prior best of ``case`` on ``device`` (the recorded
        kernel, 1.0, when there is none); a passing improvement becomes the new prior best
        (``record``: what to store with it) when ``improve`` (the verdict was "faster").
        ``upper``: the upper end of the speedup's interval: it fails only when even that is
        below the prior best less the band (conclusively slower)."""
        with _locked(self.path):
            data = self._read()
            entry = data["cases"].get(case, {}).get(device)
            if entry:
                prior, source = float(entry["speedup"]), "store"
            else:
                prior, source = 1.0, "recorded kernel"
            passed = (speedup if upper is None else upper) >= prior * (1.0 - band)
            improved = passed and improve and speedup > prior
            if improved:
                data["cases"].setdefault(case, {})[device] = {
                    **(record or {}), "speedup": speedup, "updated": now()}
                write_json_atomic(self.path, data)
        return RegressionCheck(passed, speedup, prior, band, source, improved)


def gate_regression(speedup: float, *, band: float = DEFAULT_BAND,
                    upper: float | None = None) -> RegressionCheck:
    """The gate without a store: the prior best is the recorded kernel (speedup 1.0)."""
    passed = (speedup if upper is None else upper) >= 1.0 - band
    return RegressionCheck(passed, speedup, 1.0, band, "recorded kernel", speedup > 1.0)


class Ledger:
    """Append-only JSONL of every validation outcome (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"time": now(), **entry}, sort_keys=True, default=str) + "\n"
        with _locked(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = "\n" + line  # end a torn last line: it stays torn, this one intact
                data = line.encode()
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self, *, must_exist: bool = False) -> list[dict[str, Any]]:
        """Every entry; a torn line (a crash mid-write: the start of a JSON object) is skipped.
        A missing ledger is empty (an error with ``must_exist``); one that is not UTF-8 text,
        or holds a line that is neither a JSON object nor a torn one, is an error."""
        if not self.path.exists():
            if must_exist:
                raise ConfigError(f"ledger {self.path} not found",
                                  hint="give the path of a ledger written by "
                                       "kernforge integrity validate --ledger FILE")
            return []
        try:
            text = self.path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"ledger {self.path} is unreadable ({exc})",
                              hint="a ledger is UTF-8 JSON lines; point at one kernforge "
                                   "wrote, or restore it") from None
        out = []
        for i, raw in enumerate(text.splitlines()):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                entry = None
            if isinstance(entry, dict):
                out.append(entry)
            elif entry is not None or not raw.lstrip().startswith("{"):  # not a torn write
                raise ConfigError(f"{self.path} is not a ledger: line {i + 1} is not a JSON "
                                  f"object", hint="give the path of a ledger written by "
                                                  "kernforge integrity validate --ledger FILE")
        return out
