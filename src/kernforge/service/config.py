"""What a replay service is: where its workers run and how long an evaluation may take.

A :class:`ServiceConfig` comes from keyword arguments, the CLI, or a file (YAML, TOML or JSON;
unknown keys are errors that name the key)::

    cluster: local            # local | slurm | pbs | lsf
    backend: cpu              # cpu: one worker per core group; cuda: one worker per GPU
    workers: 2                # default: cpu min(2, cores), cuda every visible GPU
    cores_per_worker: 1       # cpu only; default: cores // workers
    min_timeout_s: 1.0        # watchdog floor
    timeout_factor: 50.0      # watchdog: factor x the recorded variant's evaluation time
    compile_timeout_s: 300.0  # watchdog of the compile stage (and of the baseline run)
    allowed_failures: 10      # scheduler: deaths a *queued* request survives (see service.md)
    state_cache_mb: 8192      # per worker: prepared device states kept (LRU by bytes; 0 = off)
    jobs: 2                   # jobqueue clusters: batch jobs (one worker each)
    jobqueue: {cores: 4, memory: 16GB, queue: gpu, walltime: "02:00:00"}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.strict import field_names, strict_keys
from ..replay.devstate import DEFAULT_STATE_CACHE_MB

CLUSTERS = ("local", "slurm", "pbs", "lsf")
BACKENDS = ("cpu", "cuda", "null")
#: the Dask resource every replay worker offers once (one evaluation at a time per worker)
RESOURCE = "replay"
#: default bound of each worker's device-state cache, MiB (buffers + pristine copies)


@dataclass(frozen=True)
class ServiceConfig:
    cluster: str = "local"
    backend: str = "cpu"
    workers: int | None = None
    cores_per_worker: int | None = None
    min_timeout_s: float = 1.0
    timeout_factor: float = 50.0
    compile_timeout_s: float = 300.0
    allowed_failures: int = 10
    state_cache_mb: int = DEFAULT_STATE_CACHE_MB
    host: str = "127.0.0.1"
    port: int = 0
    jobs: int = 1
    jobqueue: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster not in CLUSTERS:
            raise ConfigError(f"unknown cluster kind {self.cluster!r}",
                              hint=f"use one of: {', '.join(CLUSTERS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown service backend {self.backend!r}",
                              hint=f"use one of: {', '.join(BACKENDS)}")
        for name in ("workers", "cores_per_worker", "jobs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"service {name}={v!r} must be a positive integer")
        for name in ("min_timeout_s", "timeout_factor", "compile_timeout_s"):
            if not float(getattr(self, name)) > 0:
                raise ConfigError(f"service {name}={getattr(self, name)!r} must be > 0")
        if self.allowed_failures < 0:
            raise ConfigError("allowed_failures must be >= 0")
        if isinstance(self.state_cache_mb, bool) or not isinstance(self.state_cache_mb, int) \
                or self.state_cache_mb < 0:
            raise ConfigError(f"service state_cache_mb={self.state_cache_mb!r} must be an "
                              f"integer >= 0", hint="0 turns the device-state cache off")
        if self.jobqueue and self.cluster == "local":
            raise ConfigError("jobqueue options given for a local cluster",
                              hint="set cluster: slurm, pbs or lsf, or drop jobqueue:")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ServiceConfig:
        return cls(**strict_keys(data, field_names(cls), "the service configuration"))

    @classmethod
    def from_file(cls, path: Path) -> ServiceConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"service configuration {path} not found",
                              hint="give the path of a YAML, TOML or JSON file")
        text = path.read_text()
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml
                data = yaml.safe_load(text) or {}
            elif path.suffix == ".toml":
                import tomllib
                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # any parser's error is the user's input
            raise ConfigError(f"cannot parse service configuration {path}: {exc}",
                              hint="check its syntax (YAML, TOML or JSON by extension)") from exc
        if isinstance(data, Mapping) and "service" in data:  # the optional top-level table
            data = strict_keys(data, ("service",), "the top level", source=str(path))["service"]
        return cls(**strict_keys(data, field_names(cls), "the service configuration",
                                 source=str(path)))

    def to_json(self) -> dict[str, Any]:
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v)
                for f in fields(self)}

    def run_timeout(self, baseline_s: float) -> float:
        """The run-stage watchdog for a candidate whose recorded variant evaluates (with the
        same protocol, compile excluded) in ``baseline_s`` seconds."""
        return max(self.min_timeout_s, self.timeout_factor * baseline_s)


def cpu_groups(workers: int | None, cores_per_worker: int | None) -> list[list[int]]:
    """The cores of each CPU worker: ``workers`` disjoint groups of the cores this process may
    use (default min(2, cores) workers, the cores split evenly)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = list(range(os.cpu_count() or 1))
    n = workers or min(2, len(cores))
    per = cores_per_worker or max(1, len(cores) // n)
    if n * per > len(cores):
        raise ConfigError(f"{n} workers x {per} cores need {n * per} cores; this machine "
                          f"offers {len(cores)}",
                          hint="lower --workers or --cores-per-worker")
    return [cores[i * per:(i + 1) * per] for i in range(n)]
