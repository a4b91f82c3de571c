"""Run a native unit's variants in a child process, so no kernel can take the caller down.

``python -m kernforge.replay.native_child REQUEST.json RESULT.json``: the request names the
unit, the variants, the protocol and optionally an interleaved comparison; the child writes one
measurement per variant (and the comparison) as JSON. ``... --serve IN_FD OUT_FD REQUEST.json``:
a session's child (:mod:`.native_session`), one variant per request line. :func:`run_isolated` is the caller's side:
a child killed by a signal, or one that outlives its timeout, costs only its own evaluations
(RUNTIME_FAILED or TIMEOUT, with the cause); a unit whose data fails its hash checks is a
RecordingFormatError, raised before any variant runs.

The comparison is every comparison's (adaptive passes, up to ``max_passes``, default 3x
``passes``), with the device's idle check before the unit's first run and once more after the
last pass (:mod:`kernforge.harness.busy`); :func:`judged` is its verdict, by
:func:`~kernforge.harness.verdict.judge_ab` as a recording's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..backends.cxx_names import pointee_dtype
from ..core import (
    KernforgeError,
    Measurement,
    RecordingError,
    RecordingFormatError,
    Status,
    Tolerance,
)
from ..core.errors import exit_cause
from ..core.lifetime import die_with_parent
from ..harness.busy import combine, watch_probe
from ..harness.compare import ABResult
from ..harness.provenance import IdleCheck, gpu_idle
from ..harness.verdict import NOISE_BAND, Judgement, judge_ab
from ..record.native_format import read_native
from .native import NativeReplay, NativeVariant, compare, evaluate


def _tolerance(given: Any) -> Tolerance | None:
    """A request's tolerance: a Tolerance's JSON, its spec, or none (bitwise)."""
    return (Tolerance.from_json(given) if isinstance(given, dict)
            else Tolerance.parse(given) if given else None)


def _child(request: dict[str, Any]) -> dict[str, Any]:
    try:  # every blob hash-checked before anything runs: damaged data is no variant's fault
        rec = read_native(request["unit"], verify=True)
    except RecordingError as exc:
        return {"recording_error": exc.message, "hint": exc.hint}
    tol = _tolerance(request.get("tolerance"))
    try:
        rp = NativeReplay(rec, fixed=request.get("fixed", True))
    except KernforgeError as exc:
        return {"error": exc.message, "status": Status.LAUNCH_FAILED.value}
    variants = [NativeVariant.from_json(v) for v in request["variants"]]
    out: dict[str, Any] = {"relocated": rp.relocated, "refusals": rp.drv.refusals,
                           "results": [], "identity": rp.drv.identity()}
    cmp = request.get("compare")
    if cmp:  # the device before any of the unit's runs, and once more after the last pass
        bus = rp.drv.pci_bus()
        before, seen = gpu_idle(bus), watch_probe(lambda: gpu_idle(bus))
    for v in variants:
        m = evaluate(rp, v, warmup=request.get("warmup", 3), repeat=request.get("repeat", 10),
                     tolerance=tol, dtype=request.get("dtype") or pointee_dtype(rec.entry),
                     flush=request.get("flush", True))
        out["results"].append(m.to_json())
        if m.status in (Status.RUNTIME_FAILED,):
            break  # the context is lost: later variants cannot run in this process
    if cmp and len(out["results"]) == len(variants) and \
            all(r["status"] == "OK" for r in out["results"]):
        passes = request.get("passes", 7)
        ab = compare(rp, variants[cmp[0]], variants[cmp[1]], passes=passes,
                     max_passes=request.get("max_passes") or 3 * passes)
        idle = combine(before, seen.result())
        out["compare"] = {"speedup": ab.speedup, "ci": [ab.ci_low, ab.ci_high],
                          "median_a": ab.median_a, "median_b": ab.median_b,
                          "ratios": list(ab.ratios), "confidence": ab.confidence,
                          "ab": ab.to_json(), "idle": idle.to_json() if idle else None}
    return out


def idle_of(cmp: Mapping[str, Any]) -> IdleCheck | None:
    """The device's idle check of a comparison :func:`run_isolated` returned."""
    idle = cmp.get("idle")
    return IdleCheck(**idle) if isinstance(idle, dict) else None


def judged(cmp: Mapping[str, Any], band: float = NOISE_BAND) -> Judgement:
    """The speed verdict on a comparison :func:`run_isolated` returned: its passes judged as
    a recording's (the spread and drift of the runs, the interval), the device's idle check
    with them (busy: inconclusive, naming the GPU and how it was read)."""
    idle = idle_of(cmp)
    device = f"the GPU ({idle.method})" if idle is not None and idle.idle is False \
        else "the GPU"
    return judge_ab(ABResult.from_json(cmp["ab"]), idle=idle.idle if idle else None,
                    utilisation=idle.utilisation if idle else None, band=band, device=device)


def unless_faster(speed: Judgement) -> str | None:
    """The native gate: why a winner is not kept (its verdict's reason), None when faster."""
    return None if speed.faster else speed.reason


def run_isolated(unit: str | Path, variants: Sequence[NativeVariant], *, warmup: int = 3,
                 repeat: int = 10, tolerance: Tolerance | str | None = None,
                 dtype: str | None = None,
                 compare_pair: tuple[int, int] | None = None, passes: int = 7,
                 timeout_s: float = 300.0, fixed: bool = True, flush: bool | None = None,
                 max_passes: int | None = None) -> dict[str, Any]:
    """Evaluate ``variants`` of one unit in a fresh process; every variant gets a result.
    With a ``tolerance`` (a Tolerance or its spec), written memory is compared as ``dtype``, by default
    the element type all the kernel's pointer parameters share (from its mangled name).
    ``compare_pair``: those two compared interleaved, ``passes`` a look, up to
    ``max_passes`` (default 3x ``passes``) while inconclusive; :func:`judged` is its verdict."""
    if flush is None:  # the unit's cache state (cache_protocol.py)
        from ..record.native_format import read_native
        from .cache_protocol import protocol_for

        flush = protocol_for(read_native(unit)).flush
    request = {"unit": str(unit), "variants": [v.to_json() for v in variants], "warmup": warmup,
               "repeat": repeat, "dtype": dtype,
               "tolerance": tolerance.to_json() if isinstance(tolerance, Tolerance)
               else tolerance,
               "compare": list(compare_pair) if compare_pair else None, "passes": passes,
               "max_passes": max_passes or 3 * passes, "fixed": fixed, "flush": flush}
    with tempfile.TemporaryDirectory(prefix="kf-native-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        try:
            proc = subprocess.run([sys.executable, "-m", "kernforge.replay.native_child",
                                   str(req), str(res)], check=False, capture_output=True,
                                  text=True, timeout=timeout_s, env=env,
                                  preexec_fn=die_with_parent())  # a synchronous call: this thread outlives it
            cause = None if proc.returncode == 0 else \
                f"{exit_cause(proc.returncode)}: {proc.stderr.strip()[-500:]}"
            status = Status.RUNTIME_FAILED
        except subprocess.TimeoutExpired:
            cause, status = f"no result within {timeout_s:.0f} s", Status.TIMEOUT
        out = json.loads(res.read_text()) if res.is_file() else {"results": []}
    if "recording_error" in out:
        raise RecordingFormatError(out["recording_error"], hint=out.get("hint"))
    done = [Measurement.from_json(r) for r in out.get("results", [])]
    if "error" in out:
        done = [Measurement(Status(out["status"]), out["error"]) for _ in variants]
    while len(done) < len(variants):
        done.append(Measurement(status, f"the replay process {cause or 'stopped'}"
                                if len(done) == len(out.get("results", [])) else
                                "not run: an earlier variant lost the context"))
    out["measurements"] = done
    return out


def serve(request: dict[str, Any], requests: Any, replies: Any) -> int:
    """A session's child (:mod:`.native_session`): the unit read and placed once, then one
    variant evaluated per request line, one reply line each, until the requests end or a
    variant loses the context (its reply sent, the child exits)."""
    def reply(doc: dict[str, Any]) -> None:
        replies.write(json.dumps(doc).encode() + b"\n")
        replies.flush()

    try:
        rec = read_native(request["unit"], verify=True)
    except RecordingError as exc:
        reply({"recording_error": exc.message, "hint": exc.hint})
        return 0
    tol = _tolerance(request.get("tolerance"))
    try:
        rp = NativeReplay(rec, fixed=request.get("fixed", True))
    except KernforgeError as exc:
        reply({"error": exc.message, "status": Status.LAUNCH_FAILED.value})
        return 0
    reply({"relocated": rp.relocated, "refusals": rp.drv.refusals})
    dtype = request.get("dtype") or pointee_dtype(rec.entry)
    for line in requests:
        v = NativeVariant.from_json(json.loads(line))
        m = evaluate(rp, v, warmup=request.get("warmup", 3), repeat=request.get("repeat", 10),
                     tolerance=tol, dtype=dtype, flush=request.get("flush", True))
        reply(m.to_json())
        if m.status is Status.RUNTIME_FAILED:
            return 0  # the context is lost: the session starts a fresh child
    return 0


def main(argv: Sequence[str]) -> int:
    if argv[0] == "--serve":
        with open(int(argv[1]), "rb") as requests, open(int(argv[2]), "wb") as replies:
            return serve(json.loads(Path(argv[3]).read_text()), requests, replies)
    request = json.loads(Path(argv[0]).read_text())
    result = _child(request)
    tmp = Path(argv[1]).with_suffix(".part")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
