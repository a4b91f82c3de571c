"""Deployment spec format v1: tuned kernels keyed by kernel, device and problem (docs/deploy.md).

A spec is one JSON file: ``format`` ``"kernforge-deploy"``, ``schema_version`` 1, and one entry
per tuned kernel launch. Each entry says which kernel it is for (backend, language, entry point,
sha256 of the original code, name expression, and how the application built it), on which
device it is valid, for which problem (argument dtypes and shapes, integer scalars, the
launch geometry), what runs instead (the tuned variant) and the evidence (the interleaved
measurement that justified it). Written atomically (temporary file, fsync, rename) with a
checksum over its canonical JSON, so an edited or truncated spec is refused by the reader.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core import ConfigError, LaunchConfig
from ..core.jsonio import canonical_checksum, write_bytes_atomic
from .specdoc import (  # noqa: F401 - FORMAT..ENTRY_KEYS: names of this module too
    ENTRY_KEYS,
    FORMAT,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    DeploySpecError,
    PathLike,
    bad,
    load_document,
)


# ---- the data model ---------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelKey:
    """Which kernel an entry replaces: it must be this code, built this way."""

    backend: str
    language: str
    entry: str
    code_sha256: str
    name_expression: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)  # original, resolved
    defines: Mapping[str, str] = field(default_factory=dict, compare=False)  # original

    @property
    def label(self) -> str:
        return self.name_expression or self.entry

    def lookup(self) -> tuple[str, str, str, str, str | None]:
        """The part an application's launch is looked up by."""
        return (self.backend, self.language, self.entry, self.code_sha256, self.name_expression)


@dataclass(frozen=True)
class ProblemArg:
    """One argument of the problem: arrays by dtype and shape, scalars by dtype and, when
    ``value`` is not None (integers, bools, compiled-in constants), by value."""

    name: str
    kind: str  # "array" | "scalar"
    dtype: str
    shape: tuple[int, ...] | None = None
    value: Any = None


@dataclass(frozen=True)
class Problem:
    args: tuple[ProblemArg, ...]
    launch: LaunchConfig  # grid, block, shared_mem of the original launch (threads: unused)
    # groups of array arguments that share memory; () = all distinct (a recording's buffers
    # are distinct, so a tuned variant was only verified without aliasing)
    aliases: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class TunedVariant:
    """What runs instead: ``code`` None = the original code; the options are complete."""

    code: str | None
    options: Mapping[str, Any]
    defines: Mapping[str, str]
    constants: Mapping[str, Any]
    launch: LaunchConfig  # threads None = the application's own thread count


@dataclass(frozen=True)
class Evidence:
    baseline_s: float
    tuned_s: float
    speedup: float
    speedup_ci: tuple[float, float] | None
    recording: str
    identity: Mapping[str, Any]
    verified: bool | None = None  # every integrity gate passed (None: not stated)
    idle: bool | None = None  # the device was idle before the measurement (None: unknown)


@dataclass(frozen=True)
class DeployEntry:
    kernel: KernelKey
    device: Mapping[str, Any]
    problem: Problem
    variant: TunedVariant
    evidence: Evidence

    def match_key(self) -> str:
        """Entries with equal keys replace the same launches (one of them is redundant)."""
        body = {k: v for k, v in entry_to_json(self).items() if k in ("kernel", "device",
                                                                     "problem")}
        return canonical_checksum(body)


@dataclass(frozen=True)
class DeploySpec:
    entries: tuple[DeployEntry, ...]
    path: Path | None = None
    kernforge_version: str = __version__
    created: str = ""


# ---- JSON -------------------------------------------------------------------------------------
def json_scalar(value: Any) -> Any:
    """A scalar as strict JSON: numpy scalars unwrapped, non-finite floats as strings."""
    np = sys.modules.get("numpy")  # none without numpy imported: reading a spec needs none
    v = value.item() if np is not None and isinstance(value, np.generic) else value
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): json_scalar(v) for k, v in mapping.items()}


def _launch_json(launch: LaunchConfig, threads: bool = True) -> dict[str, Any]:
    out = launch.to_json()
    if not threads:
        out.pop("threads")
    return out


def entry_to_json(e: DeployEntry) -> dict[str, Any]:
    k, v, ev = e.kernel, e.variant, e.evidence
    return {
        "kernel": {"backend": k.backend, "language": k.language, "entry": k.entry,
                   "code_sha256": k.code_sha256, "name_expression": k.name_expression,
                   "options": _plain(k.options), "defines": _plain(k.defines)},
        "device": _plain(e.device),
        "problem": {"args": [{"name": a.name, "kind": a.kind, "dtype": a.dtype,
                              "shape": list(a.shape) if a.shape is not None else None,
                              "value": json_scalar(a.value)} for a in e.problem.args],
                    "launch": _launch_json(e.problem.launch, threads=False),
                    "aliases": [list(g) for g in e.problem.aliases]},
        "variant": {"code": v.code, "options": _plain(v.options), "defines": _plain(v.defines),
                    "constants": _plain(v.constants), "launch": _launch_json(v.launch)},
        "evidence": {"baseline_s": ev.baseline_s, "tuned_s": ev.tuned_s, "speedup": ev.speedup,
                     "speedup_ci": list(ev.speedup_ci) if ev.speedup_ci else None,
                     "recording": ev.recording, "identity": dict(ev.identity),
                     "verified": ev.verified, "idle": ev.idle},
    }


def _float(value: Any) -> Any:
    return float(value) if value in ("nan", "inf", "-inf") else value


def entry_from_json(d: Mapping[str, Any]) -> DeployEntry:
    """An entry from its JSON object (KeyError/TypeError/ValueError on malformed input)."""
    k, p, v, ev = d["kernel"], d["problem"], d["variant"], d["evidence"]
    args = tuple(ProblemArg(a["name"], a["kind"], a["dtype"],
                            tuple(a["shape"]) if a["shape"] is not None else None,
                            _float(a["value"])) for a in p["args"])
    if any(a.kind not in ("array", "scalar") for a in args):
        raise ValueError("problem argument kinds are 'array' or 'scalar'")
    ci = ev["speedup_ci"]
    return DeployEntry(
        kernel=KernelKey(str(k["backend"]), str(k["language"]), str(k["entry"]),
                         str(k["code_sha256"]), k["name_expression"] or None,
                         dict(k["options"]), {str(n): str(x) for n, x in k["defines"].items()}),
        device=dict(d["device"]),
        problem=Problem(args, LaunchConfig.from_json(p["launch"]),
                        tuple(tuple(str(n) for n in g) for g in p.get("aliases") or ())),
        variant=TunedVariant(v["code"], dict(v["options"]),
                             {str(n): str(x) for n, x in v["defines"].items()},
                             {str(n): _float(x) for n, x in v["constants"].items()},
                             LaunchConfig.from_json(v["launch"])),
        evidence=Evidence(float(ev["baseline_s"]), float(ev["tuned_s"]), float(ev["speedup"]),
                          (float(ci[0]), float(ci[1])) if ci else None, str(ev["recording"]),
                          dict(ev["identity"]), _flag(ev.get("verified")),
                          _flag(ev.get("idle"))))


def _flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"expected true, false or null, got {value!r}")


# ---- writing and reading ----------------------------------------------------------------------
def spec_to_json(entries: Sequence[DeployEntry]) -> dict[str, Any]:
    from datetime import UTC, datetime  # writing only: reading a spec at start-up needs none

    doc: dict[str, Any] = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "kernforge_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="microseconds"),
        "entries": [entry_to_json(e) for e in entries]}
    doc["checksum"] = canonical_checksum(doc)
    return doc


def write_spec(path: PathLike, entries: Sequence[DeployEntry]) -> Path:
    """Write a spec atomically (temporary file in the same directory, fsync, rename)."""
    out = Path(path)
    data = json.dumps(spec_to_json(entries), indent=2, allow_nan=False).encode() + b"\n"
    try:
        return write_bytes_atomic(out, data)
    except OSError as exc:
        raise DeploySpecError(f"cannot write deployment spec {out}: {exc}",
                              hint="check free disk space and write permission") from exc


def read_spec(path: PathLike) -> DeploySpec:
    """Read and validate a spec; raise :class:`DeploySpecError` naming the file and the
    problem (missing, not JSON or truncated, another format, an unknown schema_version, a
    checksum that does not match -- the file was edited -- or malformed entries)."""
    p = Path(path)
    return spec_from_document(p, load_document(p))


def spec_from_document(path: Path, doc: Mapping[str, Any]) -> DeploySpec:
    """The spec of a document :func:`~.specdoc.load_document` checked (raises
    :class:`DeploySpecError` for a malformed entry)."""
    entries = []
    for i, e in enumerate(doc["entries"]):
        try:
            entries.append(entry_from_json(e))
        except (KeyError, TypeError, ValueError, AttributeError, ConfigError) as exc:
            raise bad(path, f"entries[{i}] is malformed: {type(exc).__name__}: {exc}") from None
    return DeploySpec(tuple(entries), path, str(doc.get("kernforge_version", "")),
                      str(doc.get("created", "")))
