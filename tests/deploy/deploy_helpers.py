"""Shared helpers of the deployment tests: a recorded null-backend kernel, result.json files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kernforge.backends import Kernel
from kernforge.core import Recording
from kernforge.core.jsonio import sign
from kernforge.deploy import DeployEntry, entry_from_recording
from kernforge.record import load_recording, record

AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n] + BIAS
'''


def axpy_kernel(bias: int = 0) -> Kernel:
    return Kernel(AXPY, "axpy", backend="null", defines={"BIAS": bias})


def record_axpy(root: Path, n: int = 4) -> Recording:
    with record(root) as rec:
        axpy_kernel()(np.arange(float(n)), np.ones(n), 2.0, n)
    return load_recording(rec.paths[0])


def axpy_entry(rec: Recording, **overrides: Any) -> DeployEntry:
    """The recorded axpy with BIAS=100 (or ``overrides`` for Variant.with_)."""
    variant = rec.variant.with_(**(overrides or {"defines": {"BIAS": 100}}))
    return entry_from_recording(rec, variant, baseline_s=2e-3, tuned_s=1e-3, speedup=2.0,
                                speedup_ci=(1.9, 2.1))


def refuse_tuned_axpy(monkeypatch: Any, message: str) -> list[int]:
    """Make the null backend raise ``RuntimeError(message)`` for the tuned axpy (BIAS=100)
    and run every other launch; returns the list that gets one item per refused launch."""
    from kernforge.backends.null import NullBackend

    real = NullBackend.launch
    refused: list[int] = []

    def launch(self, compiled, args, launch=None):  # type: ignore[no-untyped-def]
        if dict(compiled.variant.defines).get("BIAS") == "100":
            refused.append(1)
            raise RuntimeError(message)
        return real(self, compiled, args, launch)

    monkeypatch.setattr(NullBackend, "launch", launch)
    return refused


def write_result(directory: Path, rec: Recording, variant: Mapping[str, Any], *,
                 speedup: float = 1.5, status: str = "OK",
                 verdict: str | None = "accepted", idle: bool | None = True,
                 ci: tuple[float, float] | None = None) -> Path:
    """A tuning result file as the tuner glue writes it (kernforge-tune-result v1); ``verdict``
    None: without a validation (as the service wrote before it validated)."""
    directory.mkdir(parents=True, exist_ok=True)
    full = {"code": None, "options": {}, "defines": {}, "constants": {},
            "launch": rec.launch.to_json(), **variant}
    doc = {"format": "kernforge-tune-result", "schema_version": 1, "unit": rec.name,
           "recording": str(rec.path.resolve()), "backend": rec.backend, "sampler": "tpe",
           "evaluations": 3, "status": status, "best": {"config": {}, "variant": full},
           "baseline_median_s": 2e-3, "best_median_s": 2e-3 / speedup, "speedup": speedup,
           "speedup_ci": list(ci) if ci else [speedup * 0.95, speedup * 1.05],
           "validation": {"verdict": verdict, "status": "OK", "speedup": speedup,
                          "idle": {"idle": idle, "utilisation": 0.0 if idle else 1.0,
                                   "method": "test"}}
           if verdict is not None else None}
    path = directory / "result.json"
    path.write_text(json.dumps(sign(doc), indent=2))
    return path


def resign(path: Path, **changes: Any) -> dict[str, Any]:
    """Change fields of a result file and sign it again (as a producer would have written
    it); returns the new document."""
    doc = json.loads(path.read_text())
    doc.update(changes)
    doc = sign(doc)
    path.write_text(json.dumps(doc, indent=2))
    return doc
