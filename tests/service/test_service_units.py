"""Configuration, cluster specs and the classification of worker deaths (no cluster)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kernforge.core import BackendUnavailableError, ConfigError, Measurement, Status
from kernforge.service import ServiceConfig
from kernforge.service.cluster import jobqueue_cluster, jobqueue_options, worker_specs
from kernforge.service.config import cpu_groups
from kernforge.service.monitor import Monitor, classify, measurement_from_json


def test_config_rejects_unknown_keys_and_bad_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="worker_count"):
        ServiceConfig.from_mapping({"worker_count": 2})
    with pytest.raises(ConfigError, match="cluster"):
        ServiceConfig(cluster="kubernetes")
    with pytest.raises(ConfigError, match="jobqueue"):
        ServiceConfig(jobqueue={"cores": 4})
    f = tmp_path / "svc.toml"
    f.write_text('[service]\ncluster = "slurm"\njobs = 3\n[service.jobqueue]\ncores = 8\n')
    cfg = ServiceConfig.from_file(f)
    assert cfg.jobs == 3 and cfg.jobqueue == {"cores": 8}
    f.write_text('workers = 1\n[service]\ncluster = "slurm"\n')  # a key beside [service]
    with pytest.raises(ConfigError, match="unknown key 'workers' in the top level"):
        ServiceConfig.from_file(f)
    f.write_text('cluster = "local"\nworker = 1\n')
    with pytest.raises(ConfigError, match="svc.toml: unknown key 'worker'"):
        ServiceConfig.from_file(f)
    assert ServiceConfig(min_timeout_s=1, timeout_factor=50).run_timeout(0.1) == 5.0
    assert ServiceConfig().run_timeout(0.001) == 1.0


def test_cpu_workers_get_disjoint_core_groups() -> None:
    groups = cpu_groups(None, None)
    flat = [c for g in groups for c in g]
    assert len(flat) == len(set(flat)) and 1 <= len(groups) <= 2
    with pytest.raises(ConfigError, match="cores"):
        cpu_groups(64, 64)
    specs = worker_specs(ServiceConfig(workers=1, cores_per_worker=1))
    (spec,) = specs.values()
    assert spec["env"]["OMP_NUM_THREADS"] == "1" and spec["resources"] == {"replay": 1}


def test_cuda_workers_are_pinned_one_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    specs = worker_specs(ServiceConfig(backend="cuda"))
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs.values()] == ["3", "5"]
    assert all(s["resources"] == {"replay": 1, "GPU": 1} for s in specs.values())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(BackendUnavailableError, match="GPU"):
        worker_specs(ServiceConfig(backend="cuda"))


def test_jobqueue_options_and_a_clear_error_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ServiceConfig(cluster="slurm", backend="cuda", jobqueue={"cores": 4, "queue": "gpu"})
    opts = jobqueue_options(cfg)
    assert opts["processes"] == 1 and opts["queue"] == "gpu"
    assert opts["worker_extra_args"] == ["--resources", "replay=1,GPU=1"]
    with pytest.raises(ConfigError, match="processes"):
        jobqueue_options(ServiceConfig(cluster="pbs", jobqueue={"processes": 4}))
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(BackendUnavailableError, match="dask-jobqueue"):
        jobqueue_cluster(cfg)


def test_a_slurm_job_script_starts_one_replay_worker() -> None:
    jq = pytest.importorskip("dask_jobqueue")
    cluster = jq.SLURMCluster(**jobqueue_options(ServiceConfig(
        cluster="slurm", jobqueue={"cores": 2, "memory": "8GB", "queue": "gpu"})))
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "--resources replay=1" in script and "#SBATCH -p gpu" in script


@pytest.mark.parametrize("text, status, words", [
    ("kernforge-stage: run 1.5\nFatal Python error: Segmentation fault\n\nThread 0x1",
     Status.RUNTIME_FAILED, ("SIGSEGV", "run stage")),
    ("kernforge-stage: compile 300.0\nFatal Python error: Aborted\n", Status.RUNTIME_FAILED,
     ("SIGABRT", "compile stage")),
    ("kernforge-stage: run 2.0\nTimeout (0:00:02)!\nThread 0x1", Status.TIMEOUT,
     ("2 s", "run stage")),
    ("kernforge-stage: run 2.0\n", Status.RUNTIME_FAILED, ("SIGKILL",)),
])
def test_deaths_are_classified_from_the_crash_log(text: str, status: Status,
                                                  words: tuple[str, ...]) -> None:
    m = classify({"key": "k", "worker": "tcp://w", "text": text, "t_stage": 0, "t_death": 0.1})
    assert m.status is status and all(w in m.message for w in words), m.message


def test_without_a_crash_log_the_time_of_death_decides() -> None:
    late = classify({"text": "", "stage": "run", "timeout_s": 1.0, "t_stage": 0.0,
                     "t_death": 1.2})
    early = classify({"text": "", "stage": "run", "timeout_s": 1.0, "t_stage": 0.0,
                      "t_death": 0.1})
    assert late.status is Status.TIMEOUT and early.status is Status.RUNTIME_FAILED


def test_a_deposited_measurement_is_returned_as_it_was() -> None:
    m = Measurement(Status.RUNTIME_FAILED, message="cudaErrorIllegalAddress",
                    stages=(("compile", 0.5),), extra=(("worker", "w"),))
    back = classify({"deposit": m.to_json()})
    assert back == measurement_from_json(m.to_json()) and back.message == m.message
    assert back.stages == m.stages and back.status is m.status


def _monitor_running(key: str = "kf-eval-k") -> Monitor:
    mon = Monitor()
    mon.running["tcp://w"] = {"key": key, "what": "evaluate", "worker": "tcp://w",
                              "nanny": "tcp://n", "stage": "run", "timeout_s": 1.0,
                              "t_stage": time.time(), "item": 0}
    return mon


def test_a_worker_closed_by_dask_is_not_charged_to_its_request() -> None:
    """Dask's Worker.close announces itself ("closing-worker", under the worker's address)
    before the scheduler removes the worker: that death is recorded as a close, not counted
    as a result or a death, and classified (if sending it again never helps) as no crash."""
    mon = _monitor_running("kf-eval-k-x3")
    mon.log_event("tcp://w", {"action": "closing-worker", "reason": "nanny-close"})
    mon.remove_worker(None, "tcp://w")
    record = mon.deaths["kf-eval-k-x3"]
    assert record["closed"] == "nanny-close" and record["text"] == ""
    snap = mon.snapshot()
    assert snap["deaths"] == 0 and snap["closed"] == 3 and snap["by_status"] == {}  # 3 items
    m = classify(record)
    assert m.status is Status.RUNTIME_FAILED and "closed by Dask" in m.message
    assert "nanny-close" in m.message and "crash" in m.message and "SIG" not in m.message
    assert not mon.closing  # forgotten with the worker


@pytest.mark.parametrize("topic, reason", [
    ("tcp://other", "nanny-close"),  # another worker's
    ("tcp://w", "worker-close"),  # the worker closed itself: perhaps the candidate's doing
])
def test_a_worker_that_dies_unannounced_is_still_a_death(topic: str, reason: str) -> None:
    mon = _monitor_running()
    mon.log_event(topic, {"action": "closing-worker", "reason": reason})
    assert "tcp://w" not in mon.closing
    mon.remove_worker(None, "tcp://w")
    record = mon.deaths["kf-eval-k"]
    assert "closed" not in record and record["text"] is None  # waits for the crash log
    snap = mon.snapshot()
    assert snap["deaths"] == 1 and snap["closed"] == 0
    assert snap["by_status"] == {"RUNTIME_FAILED": 1}


def test_a_worker_reloads_a_recording_recorded_again(tmp_path: Path) -> None:
    """A worker caches a loaded recording by path, but notices when the unit at that path was
    recorded again (its manifest changed) and loads the new one."""
    import shutil

    from kernforge.service.samples import record_sample
    from kernforge.service.worker import WorkerState

    first = record_sample(tmp_path / "a", n=64)
    again = record_sample(tmp_path / "b", n=128)
    unit = tmp_path / "unit"
    shutil.copytree(first, unit)
    st = WorkerState()
    old = st.load(str(unit))
    old.baselines["p"] = 1.0
    assert st.load(str(unit)) is old  # cached
    shutil.rmtree(unit)
    shutil.copytree(again, unit)
    new = st.load(str(unit))
    assert new is not old and new.baselines == {}
    assert next(a.shape for a in new.recording.args if a.is_array) == (128,)
    assert st.load(str(unit)) is new and list(st.recordings) == [str(unit.resolve())]


@pytest.mark.slow
def test_stop_kills_the_whole_service_process_group(tmp_path: Path) -> None:
    """A service that ignores SIGTERM is killed with its process group (its workers too),
    and a state file already removed is no error."""
    import os
    import subprocess
    import time

    from kernforge.service.daemon import pid_alive, stop_service, write_state

    pidfile = tmp_path / "child.pid"
    code = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); c = subprocess.Popen([sys.executable, '-c', 'import signal, "
            "time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    state = tmp_path / "serve.json"
    write_state(state, {"address": "tcp://127.0.0.1:1", "pid": proc.pid})
    try:
        stop_service(state, timeout=0.5)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child) and not state.exists()
    finally:
        for pid in (proc.pid, child):
            if pid_alive(pid):
                os.kill(pid, 9)


def test_a_client_that_fails_to_set_up_closes_what_it_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import distributed

    from kernforge.service import client as client_mod

    closed: list[str] = []

    class Cluster:
        def close(self) -> None:
            closed.append("cluster")

    class Dask:
        def __init__(self, *_: object, **__: object) -> None:
            pass

        def run_on_scheduler(self, *_: object) -> None:
            raise OSError("scheduler went away")

        def close(self) -> None:
            closed.append("dask")

    monkeypatch.setattr(client_mod, "start_cluster", lambda _cfg: Cluster())
    monkeypatch.setattr(distributed, "Client", Dask)
    with pytest.raises(OSError, match="scheduler went away"):
        client_mod.Client()
    assert closed == ["dask", "cluster"]
