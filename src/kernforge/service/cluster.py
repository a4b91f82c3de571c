"""Start the Dask cluster a service runs on: local (the default) or a batch-queue cluster.

Local: a ``SpecCluster`` built as ``LocalCluster`` builds one -- a scheduler on loopback and one
``Nanny``-supervised worker process per GPU (``cuda``) or per core group (``cpu``) -- but with
a per-worker environment: ``CUDA_VISIBLE_DEVICES`` pins each worker to its GPU;
``KERNFORGE_CORES`` and ``OMP_NUM_THREADS`` pin each CPU worker to its cores. Every worker has
one thread and offers the resource ``replay=1`` (and ``GPU=1``), which every evaluation
requests: one evaluation at a time per worker, so timings do not share a device.

Batch queues (SLURM, PBS, LSF) go through dask-jobqueue, an optional dependency: one worker per
job, with the same resources; a GPU job should hold one GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import dask

from ..core import BackendUnavailableError, ConfigError
from .config import RESOURCE, ServiceConfig, cpu_groups

JOBQUEUE_CLASSES = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "lsf": "LSFCluster"}


def scheduler_config(cfg: ServiceConfig) -> dict[str, Any]:
    """Dask settings for a scheduler kernforge starts (see docs/service.md)."""
    return {"distributed.scheduler.allowed-failures": cfg.allowed_failures,
            "distributed.scheduler.worker-ttl": "10 minutes",
            "distributed.admin.low-level-log-length": 1000}


def gpu_ids() -> list[str]:
    """The GPUs this process may use: ``$CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], check=False,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]


def worker_specs(cfg: ServiceConfig) -> dict[str, dict[str, Any]]:
    """Name -> (env, resources) of every local worker."""
    if cfg.backend == "cuda":
        gpus = gpu_ids()
        if not gpus:
            raise BackendUnavailableError(
                "the cuda service needs GPUs, and none is visible",
                hint="check nvidia-smi and CUDA_VISIBLE_DEVICES, or serve --backend cpu")
        gpus = gpus[:cfg.workers] if cfg.workers else gpus
        return {f"kf-gpu{g}": {"env": {"CUDA_VISIBLE_DEVICES": g},
                               "resources": {RESOURCE: 1, "GPU": 1}} for g in gpus}
    groups = cpu_groups(cfg.workers, cfg.cores_per_worker)
    return {f"kf-cpu{i}": {"env": {"KERNFORGE_CORES": ",".join(map(str, cores)),
                                   "OMP_NUM_THREADS": str(len(cores))},
                           "resources": {RESOURCE: 1}}
            for i, cores in enumerate(groups)}


def local_cluster(cfg: ServiceConfig) -> Any:
    """Start the local cluster (blocks until every worker is up)."""
    from distributed import Nanny, Scheduler, SpecCluster
    from distributed.deploy.cluster import Cluster

    class NannyCluster(SpecCluster):
        """A SpecCluster that keeps its nannies. SpecCluster closes a nanny whose worker has
        not registered again ``distributed.deploy.lost-worker-timeout`` (15 s) after the
        scheduler removed it; here a nanny restarts its worker after every crash a candidate
        causes, and under load (or after crashes in a row) that can take longer: the nanny,
        and with it a worker of the service, was then closed for good ("nanny-close"), and
        the request running on its fresh worker was charged with a crash."""

        def _update_worker_status(self, op: str, msg: Any) -> None:
            Cluster._update_worker_status(self, op, msg)  # no lost-worker timer

    workers = {
        name: {"cls": Nanny, "options": {
            "name": name, "nthreads": 1, "resources": spec["resources"], "env": spec["env"],
            "host": cfg.host, "memory_limit": 0, "dashboard": False,
            "silence_logs": 40}}
        for name, spec in worker_specs(cfg).items()}
    scheduler = {"cls": Scheduler, "options": {
        "host": cfg.host, "port": cfg.port, "dashboard": False, "dashboard_address": ":0"}}
    with dask.config.set(scheduler_config(cfg)):
        return NannyCluster(workers=workers, scheduler=scheduler, silence_logs=40,
                            name="kernforge")


def jobqueue_cluster(cfg: ServiceConfig) -> Any:
    """A dask-jobqueue cluster of ``cfg.jobs`` jobs, one replay worker each."""
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise BackendUnavailableError(
            f"cluster: {cfg.cluster} needs dask-jobqueue, which is not installed",
            hint="pip install 'kernforge[cluster]' (or dask-jobqueue), or use cluster: local "
                 "or a scheduler address") from exc
    cls = getattr(dask_jobqueue, JOBQUEUE_CLASSES[cfg.cluster])
    with dask.config.set(scheduler_config(cfg)):
        cluster = cls(**jobqueue_options(cfg))
    cluster.scale(jobs=cfg.jobs)
    return cluster


def jobqueue_options(cfg: ServiceConfig) -> dict[str, Any]:
    """The keyword arguments of the jobqueue cluster: the user's, plus one worker process per
    job offering the replay resource (and a GPU on the cuda backend)."""
    opts: dict[str, Any] = dict(cfg.jobqueue)
    extra = list(opts.pop("worker_extra_args", []))
    if "processes" in opts or "--resources" in extra:
        raise ConfigError("jobqueue options 'processes' and '--resources' are set by kernforge",
                          hint="one worker process per job, offering replay=1; drop them")
    resources = f"{RESOURCE}=1" + (",GPU=1" if cfg.backend == "cuda" else "")
    opts.setdefault("cores", 1)
    opts.setdefault("memory", "4GB")
    opts.update(processes=1, worker_extra_args=[*extra, "--resources", resources])
    return opts


def start_cluster(cfg: ServiceConfig) -> Any:
    if cfg.cluster == "local":
        return local_cluster(cfg)
    return jobqueue_cluster(cfg)


def describe(cfg: ServiceConfig) -> Mapping[str, Any]:
    """What start_cluster would start (for messages and the state file)."""
    if cfg.cluster != "local":
        return {"cluster": cfg.cluster, "jobs": cfg.jobs}
    return {"cluster": "local", "workers": worker_specs(cfg)}
