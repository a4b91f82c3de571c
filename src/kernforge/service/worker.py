"""What lives in each worker process: recordings loaded once (their blobs resident in memory),
the backend with its compiled-module cache, one prepared device state per unit
(:mod:`.devstate`), the recorded variant's evaluation time per protocol (the watchdog's base),
and the Dask WorkerPlugin that sets this up (again after a restart) and releases it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from ..backends import Backend, get_backend
from ..core import Recording
from ..record import load_recording
from ..record.format import MANIFEST
from ..replay.devstate import DeviceStates, StateKey, state_key
from .guard import install_crash_log, remove_crash_log

log = logging.getLogger("kernforge.service")
PLUGIN = "kernforge-replay"
PRELOAD_KEY = ["kernforge", "preload"]


def _resident(recording: Recording) -> Recording:
    """The same recording whose blobs are read from disk once and then kept in memory
    (read-only): every later prepare copies the prologue from memory."""
    base = recording.loader
    cache: dict[str, np.ndarray] = {}
    lock = threading.Lock()

    def load(blob_id: str) -> np.ndarray:
        with lock:
            if blob_id not in cache:
                assert base is not None
                array = np.array(base(blob_id), copy=True)
                array.flags.writeable = False
                cache[blob_id] = array
            return cache[blob_id]

    return replace(recording, loader=load)


@dataclass
class Loaded:
    """One recording held by this worker."""

    recording: Recording
    backend: Backend
    scalars: dict[str, Any]
    baselines: dict[tuple[Any, ...], float] = field(default_factory=dict)
    evaluations: int = 0
    stamp: tuple[int, ...] | None = None  # of the manifest when loaded (see _stamp)
    key: StateKey = ("", "", "")  # of its device state (see devstate.state_key)


def _stamp(directory: str) -> tuple[int, ...] | None:
    """What changes when a unit is recorded again at the same path (the manifest is written
    anew: another inode, mtime or size); None when there is no manifest to read."""
    try:
        st = os.stat(Path(directory) / MANIFEST)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_dev)


class WorkerState:
    """Everything a worker keeps between requests (one per process)."""

    def __init__(self) -> None:
        self.recordings: dict[str, Loaded] = {}
        self.states = DeviceStates()
        self.lock = threading.Lock()
        self.started = time.time()
        self.evaluations = 0

    def load(self, path: str) -> Loaded:
        """The recording at ``path``, loaded once -- and again when it was re-recorded since
        (its manifest changed; the old one's blobs and baselines are dropped)."""
        key = str(Path(path).resolve())
        stamp = _stamp(key)
        with self.lock:
            held = self.recordings.get(key)
            if held is not None and (stamp is None or held.stamp != stamp):
                del self.recordings[key]
                self.states.drop_unit(key)
            if key not in self.recordings:
                rec = _resident(load_recording(key))
                for a in rec.args:  # read every blob now, not during the first request
                    for blob in (a.prologue, a.epilogue):
                        if blob is not None:
                            rec.blob(blob)
                be = get_backend(rec.backend)
                self.recordings[key] = Loaded(
                    rec, be, {a.name: a.value for a in rec.args if not a.is_array},
                    stamp=stamp, key=state_key(key, rec, be.name))
            return self.recordings[key]

    def release(self) -> None:
        """Drop every device state (worker teardown) and hand CuPy's pooled memory back."""
        self.states.clear()
        for loaded in list(self.recordings.values()):
            cp = getattr(loaded.backend, "cp", None)
            if cp is not None:
                try:
                    cp.get_default_memory_pool().free_all_blocks()
                except Exception as exc:  # noqa: BLE001 - best effort at teardown
                    log.debug("could not free the CuPy memory pool: %s", exc)
                break

    def summary(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "recordings": sorted(self.recordings),
                "evaluations": self.evaluations, "uptime_s": time.time() - self.started,
                "device_states": self.states.summary(),
                "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else None,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


_state: WorkerState | None = None
_state_lock = threading.Lock()


def state() -> WorkerState:
    global _state
    with _state_lock:
        if _state is None:
            _state = WorkerState()
        return _state


def pin_cores() -> None:
    """Bind every thread of this process to ``$KERNFORGE_CORES`` (set per worker by the
    cluster; OpenMP threads started later inherit it)."""
    text = os.environ.get("KERNFORGE_CORES", "")
    if not text or not hasattr(os, "sched_setaffinity"):
        return
    cores = {int(c) for c in text.split(",") if c.strip()}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass


class ReplayPlugin(WorkerPlugin):
    """Set up a replay worker: cores pinned, crash log, recordings in the preload list loaded.

    Registered once per scheduler; Dask runs ``setup`` on every worker that joins, so a worker
    restarted by its nanny is set up again and reloads its recordings."""

    name = PLUGIN
    idempotent = True

    async def setup(self, worker: Any) -> None:
        pin_cores()
        state()
        install_crash_log(worker)
        try:
            paths = await worker.scheduler.get_metadata(keys=PRELOAD_KEY, default=[])
        except Exception:  # noqa: BLE001 - preloading is an optimization only
            paths = []
        await worker.loop.run_in_executor(None, preload, list(paths or []))

    def teardown(self, worker: Any) -> None:
        if _state is not None:
            _state.release()
        remove_crash_log()


def preload(paths: list[str]) -> list[str]:
    """Load recordings into this worker (errors are left for the first request to report)."""
    done = []
    for path in paths:
        try:
            state().load(path)
            done.append(path)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not preload %s (the first request will say why): %s", path, exc)
    return done


def worker_summary(dask_worker: Any = None) -> dict[str, Any]:
    """Run on each worker by ``client.run`` (for status and metrics)."""
    return state().summary()
