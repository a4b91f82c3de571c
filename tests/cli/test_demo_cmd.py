"""``kernforge demo``'s verdict (in process, the pipeline replaced by a canned result)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.cli import demo_cmd
from kernforge.core import Status


def _result(substituted: int, *, deployed: bool = True) -> Any:
    e2e = SimpleNamespace(spec=Path("deploy.json"), identical=True, winners=[], plain_s=[2.0],
                          deployed_s=[1.0], speedup=2.0, ratios=[2.0], substituted=substituted,
                          ci=(1.8, 2.2), plain_median_s=2.0, deployed_median_s=1.0,
                          direction="faster with the spec in every round")
    overhead = SimpleNamespace(per_launch_s=12.5e-6, issue_s=5.3e-6, backend="cuda", batches=7,
                               launches=500)
    skipped = [SimpleNamespace(reason="heat_stencil: saves 0.62 us per launch (...): not "
                                      "deployed")]
    return SimpleNamespace(
        app=SimpleNamespace(script="heat3d_cpu.py", backend="cpu", wrong_label="x"),
        baseline=[], tuned=None, wrong=SimpleNamespace(status=Status.WRONG_RESULT,
                                                       failed_checks=[]),
        wrong_unit="heat_step-0", evolved=[], e2e=e2e if deployed else None, e2e_steps=200,
        confirmed=[], confirming=0,
        winners=["a winner"], overhead=overhead, overhead_error="",
        not_deployed=[] if deployed else skipped, run_dir=Path("run"))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    demo_cmd.register(p.add_subparsers())
    return p.parse_args(["demo"])


@pytest.mark.parametrize("substituted", [0, 3])
def test_demo_fails_when_no_launch_was_replaced(
        substituted: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: _result(substituted))
    rc = demo_cmd.run(_args())
    out = capsys.readouterr().out
    if substituted:
        flat = " ".join(out.split())
        assert rc == 0 and "end-to-end speedup of the application (200 steps) 2.000x [95% " \
            "CI 1.800, 2.200] (median of 1 interleaved per-round ratios" in flat
        assert "medians 2.000 s plain, 1.000 s with the spec" in flat
    else:
        assert rc == 1 and "replaced no launch" in out
        assert "end-to-end speedup of" not in out


def test_demo_says_plainly_when_nothing_was_worth_deploying(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: _result(0, deployed=False))
    rc = demo_cmd.run(_args())
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert rc == 0, out
    assert "a replaced launch costs the host +12.50 us beyond a plain one here" in out
    assert "not deployed: heat_stencil: saves 0.62 us per launch" in out
    assert "nothing deployed" in out and "end to end: nothing deployed" in out
    assert "end-to-end speedup" not in out and "deployed deploy.json" not in out


def test_demo_says_when_the_confirmation_runs_left_every_winner_out(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = _result(0, deployed=False)
    e2e = SimpleNamespace(speedup=0.95, ratios=[0.95] * 7, substituted=20, ci=(0.93, 0.97))
    winner = SimpleNamespace(recording=SimpleNamespace(source=SimpleNamespace(
        entry="heat_stencil")))
    result.confirming, result.not_deployed = 1, []
    result.confirmed = [SimpleNamespace(winner=winner, e2e=e2e, kept=False)]
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: result)
    rc = demo_cmd.run(_args())
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0, out
    assert ("heat_stencil alone in the application: 0.950x [95% CI 0.930, 0.970] (median of "
            "7 interleaved per-round ratios, 20 launches replaced): left out") in out
    assert "the application was not faster with any winner alone" in out
    assert "no verified winner saves more per launch" not in out


def test_demo_picks_the_cupy_example_when_the_cuda_backend_loads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.core import BackendUnavailableError
    from kernforge.pipeline import demo

    monkeypatch.setattr(demo, "get_backend", lambda name: object())
    assert demo.pick_app(None).script == "heat3d_cupy.py"

    def no_gpu(name: str) -> Any:
        raise BackendUnavailableError("the cuda backend needs CuPy and an NVIDIA GPU")

    monkeypatch.setattr(demo, "get_backend", no_gpu)
    assert demo.pick_app(None).script == "heat3d_cpu.py"
    assert demo.pick_app("cuda").script == "heat3d_cupy.py"


@pytest.mark.parametrize("fmt", ["final mean 0.5  checksum {}",  # examples/heat3d_cpu.py
                                 "heat3d_cupy n=64 change=1e-3 mean=0.25 checksum={}"])
def test_end_to_end_outputs_compared_by_the_printed_checksum(fmt: str) -> None:
    from kernforge.pipeline.demo_deploy import EndToEnd

    e = EndToEnd(Path("deploy.json"), [])
    e.plain_output, e.deployed_output = fmt.format("c22bcd92"), fmt.format("c22bcd92")
    assert e.identical
    e.deployed_output = fmt.format("0badf00d")
    assert not e.identical
    e.plain_output = e.deployed_output = "no checksum printed"
    assert not e.identical


def test_end_to_end_says_whether_the_rounds_agree() -> None:
    from kernforge.pipeline.demo_deploy import EndToEnd

    e = EndToEnd(Path("deploy.json"), [])
    e.ratios = [1.2, 1.1, 1.3]
    assert e.direction == "faster with the spec in every round"
    e.ratios = [0.94, 0.93, 0.95]
    assert e.direction == "slower with the spec in every round"
    e.ratios = [1.01, 0.99, 1.0]
    assert e.direction == "faster in some rounds, slower in others"


def test_wait_idle_says_it_waited_and_that_the_machine_stayed_busy(
        capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import subprocess
    import sys

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 1)]
    try:
        assert demo_cmd.wait_for_idle("cpu", 0.6, poll_s=0.1) is False
    finally:
        for b in burners:
            b.kill()
            b.wait()
    out = " ".join(capsys.readouterr().out.split())
    assert "for an idle machine: still" in out and "are not deployed" in out


TINY = ["--backend", "cpu", "--n", "3", "--steps", "2", "--trials", "1", "--repeat", "1",
        "--iterations", "1", "--inner-trials", "1", "--rounds", "1", "--confirm-rounds", "0"]


def test_demo_refuses_an_out_that_holds_an_earlier_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.cli.main import main

    out = tmp_path / "demoint"
    (out / "recordings" / "heat_step-0").mkdir(parents=True)  # an interrupted demo's
    before = sorted(out.rglob("*"))
    rc = main(["demo", "--out", str(out), *TINY])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, err
    assert f"--out {out} is not empty (it holds recordings)" in err
    assert "choose another --out" in err and f"or remove {out}" in err
    assert sorted(out.rglob("*")) == before


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--n", "2", "at least 3 (the stencil updates the interior points 1..n-2"),
    ("--n", "-1", "at least 3"),
    ("--steps", "1", "at least 2 (the demo records each kernel from its second launch on)")])
def test_demo_refuses_a_problem_it_cannot_show_before_any_work(
        option: str, value: str, message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.cli.main import main

    with pytest.raises(SystemExit) as exc:  # the last --n / --steps counts
        main(["demo", "--out", str(tmp_path / "d"), *TINY, option, value])
    assert exc.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "d").exists()


def test_demo_on_cuda_without_cupy_is_backend_unavailable_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy imports here")
    except ImportError:
        pass
    from kernforge.cli.main import main

    rc = main(["demo", "--out", str(tmp_path / "d"), *TINY, "--backend", "cuda"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 3 and "needs CuPy and an NVIDIA GPU" in err and "Traceback" not in err, err
    assert not (tmp_path / "d" / "recordings").exists()
