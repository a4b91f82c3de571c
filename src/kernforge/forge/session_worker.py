"""The worker side of the forge's supervised sessions (:mod:`.isolated`): one cell's session
held open in a supervised worker process (``kernforge.replay.isolate_worker``) between the
requests of one forge round, the same screen/check/compare code an in-process run calls.

Requests name the session they belong to (the cell and the seed its fields were allocated
from) and the seed its inputs hold now, so a fresh worker (the last one was killed by a
candidate) opens the session again with exactly those inputs and the run goes on. After a
failure on the GPU the worker probes its CUDA context; when the fault is sticky (an illegal
address, a trap) the error is marked ``recycle``: answered, then this worker ends and the
next request gets a fresh context.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..core import KernforgeError
from ..stencil.spec import Cell

_STATE: dict[str, Any] = {"key": None, "stack": None, "session": None, "seed": None}
_DEVICE: list[Any] = []  # the worker's GpuDevice, made once


def device() -> Any:
    if not _DEVICE:
        from .measure import GpuDevice

        _DEVICE.append(GpuDevice())
    return _DEVICE[0]


def identity() -> dict[str, Any]:
    """The worker's device, as ``GpuDevice.identity`` names it."""
    return dict(device().identity())


def close() -> None:
    """Close the open session (its fields and loaded operators go)."""
    stack = _STATE["stack"]
    _STATE.update(key=None, stack=None, session=None, seed=None)
    if stack is not None:
        stack.close()


def _open(kind: str, cell: Cell, seed: int) -> Any:
    from .sessions import emulated_sessions, gpu_sessions

    close()
    stack = contextlib.ExitStack()
    factory = gpu_sessions(device(), cell, seed=seed) if kind == "gpu" \
        else emulated_sessions(cell, seed=seed)
    session = stack.enter_context(factory)
    _STATE.update(stack=stack, session=session, seed=seed)
    return session


def _healthy() -> bool:
    """Whether this worker's CUDA context still works after a failure."""
    try:
        dev = device()
        dev.synchronize()
        a = dev.cp.zeros(1, dtype="f4")
        a += 1
        dev.synchronize()
        return True
    except Exception:  # noqa: BLE001 - a sticky fault answers every later call with it
        return False


def request(kind: str, cell: Cell, opened: int, data: int, method: str,
            args: tuple[Any, ...], seed: int | None = None) -> Any:
    """``method`` (screen, check, compare) of the session of ``cell`` opened with seed
    ``opened``, whose inputs hold seed ``data``; ``seed``: a check's fresh inputs."""
    key = (kind, cell.id, opened)
    if _STATE["key"] != key:
        session = _open(kind, cell, data)
        _STATE["key"] = key
    else:
        session = _STATE["session"]
        if _STATE["seed"] != data:  # inputs as the supervisor's run holds them
            session.dcell.refresh(data)
            _STATE["seed"] = data
    try:
        if method == "check":
            _STATE["seed"] = seed
            return session.check(*args, seed=seed)
        return getattr(session, method)(*args)
    except KernforgeError as exc:
        if kind == "gpu" and not _healthy():
            exc.recycle = True  # type: ignore[attr-defined]
            _STATE.update(key=None, stack=None, session=None, seed=None)
        raise
