"""The child side of supervised evaluation (:mod:`.isolate`): a loop that runs what the
supervisor asks, one request at a time, in a process of its own.

The worker keeps what makes an evaluation cheap: recordings (loaded once per path), the
backend's in-process compile cache and, where the backend fingerprints buffers on the device,
the last recording's device state (the prologue uploaded once, reused while its pristine copies
are intact). Before its first request it makes the backends it was told
to warm ready (:func:`warm`: on CUDA, CuPy imported, the context created, the helper kernels
built), so that this cost overlaps the supervisor's own set-up. It compiles a candidate first
and tells the supervisor (``("stage", "run")``), so that the supervisor can hold the run stage
to a limit derived from the baseline's run time instead of the compile limit. A fatal signal
writes Python's stacks (:mod:`faulthandler`) to the worker's crash file, which the supervisor
reads to say where the candidate died. After a failure on a backend whose faults are sticky (a
CUDA context after an illegal address or a trap), the worker answers and then ends itself, so
the next candidate gets a fresh context.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import KernforgeError, Measurement, Recording, Status, Variant
from ..core.errors import error_to_json
from .devstate import DeviceStates, Held, state_key

_RECORDINGS: dict[str, Recording] = {}
_STATES = DeviceStates()  # each recording's prepared device state, kept between evaluations
_FAILED = (Status.RUNTIME_FAILED, Status.LAUNCH_FAILED, Status.TIMEOUT)


def recording(path: str) -> Recording:
    """The recording at ``path``, loaded once per worker."""
    rec = _RECORDINGS.get(path)
    if rec is None:
        from ..record import load_recording

        rec = _RECORDINGS[path] = load_recording(path)
    return rec


def held() -> dict[str, Any]:
    """What this worker keeps between requests (for the supervisor's tests and diagnosis): its
    pid, the backends made so far, each loaded recording's path and object id, the device states
    kept (:meth:`.devstate.DeviceStates.summary`), its command line (the supervisor's)."""
    from ..backends.base import _instances

    return {"pid": os.getpid(), "backends": sorted(_instances),
            "recordings": {path: id(rec) for path, rec in _RECORDINGS.items()},
            "states": _STATES.summary(), "argv": list(sys.argv)}


def _checkout(path: str, rec: Recording, be: Any, kw: dict[str, Any]) -> Held | None:
    """The device state of ``rec`` to evaluate on (:mod:`.devstate`: built once, reused while
    its pristine copies are intact), or None for the integrity gates (they make their own) or
    when it cannot be built (the evaluation then prepares its own and says why)."""
    from .prepare import prepare

    if kw.get("integrity") not in (None, "basic"):
        return None
    try:
        return _STATES.checkout(state_key(path, rec, be.name),
                                lambda: prepare(rec, backend=be), 2 * rec.nbytes)
    except Exception:  # noqa: BLE001 - e.g. out of device memory: evaluate without reuse
        return None


def _sticky(backend: Any) -> bool:
    return bool(getattr(backend, "sticky_faults", False))


def evaluate(conn: Any, path: str, variant: Variant, backend: str | None,
             kw: dict[str, Any]) -> tuple[Measurement, bool]:
    """Compile ``variant`` (announcing the run stage after it), then evaluate it as
    :func:`kernforge.replay.engine.evaluate_variant` does. Returns (measurement, recycle)."""
    from ..backends import get_backend
    from .engine import _failure, evaluate_variant
    from .prepare import is_tolerant, resolve_policies

    rec = recording(path)
    be = get_backend(backend or rec.backend)
    t0 = time.perf_counter()
    try:
        policies = resolve_policies(rec, kw.get("tolerance"))
        be.compile(variant, tolerant=is_tolerant(rec, policies), recorded=rec.options)
    except KernforgeError as exc:
        if exc.status is None:
            raise
        return _failure(exc, []), False
    compile_s = time.perf_counter() - t0
    held = _checkout(path, rec, be, kw)  # its build (the recorded variant) is not the run
    conn.send(("stage", "run"))
    m = evaluate_variant(rec, variant, backend=be, state=held.prepared if held else None, **kw)
    if kw.get("integrity") is None:  # the compile was a cache hit there: report ours
        stages = tuple(("compile", compile_s) if k == "compile" else (k, s)
                       for k, s in m.stages)
        m = replace(m, stages=stages)
    if m.status in _FAILED and _sticky(be):
        return m, True  # the context is unusable: its state goes with this worker
    return _STATES.settle(held, m), False


def validate(conn: Any, path: str, variant: Variant | None, backend: str | None,
             kw: dict[str, Any]) -> tuple[Any, bool]:
    """:func:`kernforge.replay.validate.validate` in this process (the run stage announced
    once the candidate compiled, as for an evaluation)."""
    from ..backends import get_backend
    from .validate import validate as run_validate

    _STATES.clear()  # validation makes its own states: the memory is theirs
    rec = recording(path)
    be = get_backend(backend or rec.backend)
    try:
        be.compile(variant or rec.variant, tolerant=True, recorded=rec.options)
    except KernforgeError:
        pass  # validate() reports it as its verdict
    conn.send(("stage", "run"))
    v = run_validate(rec, variant, backend=be, **kw)
    return v, v.status in _FAILED and _sticky(be)


def call(conn: Any, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]
         ) -> tuple[Any, bool]:
    """Any importable function (``module:name``), e.g. a whole evolve evaluation."""
    _STATES.clear()  # what it allocates has the device to itself
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    conn.send(("stage", "run"))
    return fn(*args, **kwargs), False


_KINDS: dict[str, Callable[..., tuple[Any, bool]]] = {
    "evaluate": evaluate, "validate": validate, "call": call}


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, KernforgeError):
        return error_to_json(exc)
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return {"module": "kernforge.core.errors", "cls": "KernforgeError",
            "message": f"the evaluation worker failed: {last}",
            "hint": "this is a kernforge bug; rerun with --in-process to see the traceback",
            "status": None}


def _orphan_watch(parent: int) -> None:
    """End this worker when its supervisor is gone (killed with -9, say), even while a
    candidate spins in native code (the candidate's call does not hold the GIL)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def warm(backends: tuple[str, ...]) -> list[str]:
    """Make each named backend ready for a first evaluation: created (CUDA: CuPy imported,
    the context made), its device fingerprint kernels built (CUDA: NVRTC loaded), its cache
    flush buffer allocated. Returns those that are ready; one that cannot start here is left
    alone, and the first request for it reports why."""
    from ..backends import get_backend

    ready = []
    for name in backends:
        try:
            be = get_backend(name)
            be.fingerprints([])
            be.flush_cache()
            be.synchronize()
        except Exception:  # noqa: BLE001, S112 - reported by the request that needs it
            continue
        ready.append(name)
    return ready


def serve(fd: int, crash_file: str, backends: tuple[str, ...] = (),
          argv: list[str] | None = None) -> None:
    """The worker process's entry point: requests arrive on the socket ``fd``; the
    ``backends`` are made ready first (their requests may already be waiting on the socket).
    ``argv``: the supervisor's command line, taken as this process's (provenance records it)."""
    import threading
    from multiprocessing.connection import Connection

    if argv:
        sys.argv[:] = argv

    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True,
                     name="kernforge-orphan-watch").start()
    from ..record import load_recording  # noqa: F401 - warm: imported before the first request
    from .engine import evaluate_variant  # noqa: F401
    main(Connection(fd), crash_file, backends)


def main(conn: Any, crash_file: str, backends: tuple[str, ...] = ()) -> None:
    """Make ``backends`` ready, then serve requests until the supervisor closes the pipe (or
    a candidate kills us)."""
    with open(crash_file, "w") as log:
        faulthandler.enable(file=log, all_threads=True)
        warm(backends)
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            kind, args = msg[0], msg[1:]
            try:
                value, recycle = _KINDS[kind](conn, *args)
                conn.send(("ok", value, recycle))
            except BaseException as exc:  # noqa: BLE001 - every error goes back as data
                # a called function marks an error that left this process unusable (a sticky
                # CUDA fault): answered, then this worker ends, as after a failed evaluation
                recycle = bool(getattr(exc, "recycle", False))
                conn.send(("raise", _error(exc), recycle))
            if recycle:
                break
        faulthandler.disable()
    Path(crash_file).unlink(missing_ok=True)
    conn.close()
    os._exit(0)  # no interpreter teardown: a faulted device context must not be freed again
