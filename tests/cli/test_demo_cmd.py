"""``kernforge demo``'s verdict (in process, the pipeline replaced by a canned result)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.cli import demo_cmd
from kernforge.core import Status


def _e2e(ratios: list[float], substituted: int) -> Any:
    from kernforge.pipeline.demo_deploy import EndToEnd

    e = EndToEnd(Path("deploy.json"), [], plain_s=[2.0] * len(ratios),
                 deployed_s=[1.0] * len(ratios), ratios=ratios,
                 plain_output="checksum c22bcd92", deployed_output="checksum c22bcd92",
                 substituted=substituted)
    return e


def _result(substituted: int, *, deployed: bool = True) -> Any:
    e2e = _e2e([1.9, 2.0, 2.1, 2.0, 1.95, 2.05, 2.0, 2.0], substituted)
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
        not_deployed=[] if deployed else skipped, run_dir=Path("run"), fusion=None)


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
        assert rc == 0 and "end to end, the application (200 steps) is faster: 2.000x [99% " \
            "CI 1.900, 2.100], the interval above 1 + the 2% noise band (median of 8 " \
            "interleaved per-round ratios" in flat
        assert "medians 2.000 s plain, 1.000 s with the spec" in flat
    else:
        assert rc == 1 and "replaced no launch" in out
        assert "end to end, the application" not in out


def test_demo_prints_the_fusion_stage_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.pipeline.demo_fuse import Fusion

    result = _result(3)
    result.fusion = Fusion(False, "not fused: the step's reduction reads both grids")
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: result)
    assert demo_cmd.run(_args()) == 0
    out = capsys.readouterr().out
    assert ("\n7. fusion: nothing fused: not fused: the step's reduction reads both grids\n"
            in out)


@pytest.mark.parametrize(("text", "steps"), [("3,5,7", (3, 5, 7)), ("9", (9,)), ("0", ())])
def test_fuse_steps_are_odd_or_none(text: str, steps: tuple[int, ...]) -> None:
    p = argparse.ArgumentParser()
    demo_cmd.register(p.add_subparsers())
    args = p.parse_args(["demo", "--fuse-steps", text, "--diag-every", "0"])
    assert args.fuse_steps == steps and args.diag_every == 0
    assert _args().fuse_steps is None and _args().diag_every is None


@pytest.mark.parametrize("text", ["4", "1", "65", "3,x"])
def test_fuse_steps_refused_before_any_work(text: str, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    p = argparse.ArgumentParser()
    demo_cmd.register(p.add_subparsers())
    with pytest.raises(SystemExit):
        p.parse_args(["demo", "--fuse-steps", text])
    err = capsys.readouterr().err
    assert "is not an odd number from 3 to 63" in err or "comma-separated" in err


def test_demo_says_plainly_when_nothing_was_worth_deploying(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: _result(0, deployed=False))
    rc = demo_cmd.run(_args())
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert rc == 0, out
    assert "a replaced launch costs the host +12.50 us beyond a plain one here" in out
    assert "not deployed: heat_stencil: saves 0.62 us per launch" in out
    assert "nothing deployed" in out and "end to end: nothing deployed" in out
    assert "end to end, the application" not in out and "deployed deploy.json" not in out


@pytest.mark.parametrize(("stop", "said"), [
    ("stalled", ("stopped before its trials: the sampler proposed only configurations already "
                 "measured")),
    ("trials", "")])
def test_demo_says_why_the_tuning_stopped_before_its_trials(
        stop: str, said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The demo announced 12 trials and reported 8 evaluations (111 cache hits) without why."""
    trials = [SimpleNamespace(cached=c, config={"opt.unroll": c}) for c in (False, True, True)]
    study = SimpleNamespace(evaluations=1, trials=trials, stop_reason=stop,
                            best_trial=trials[0], baseline=trials[0])
    result = _result(0, deployed=False)
    result.tuned = SimpleNamespace(recording=SimpleNamespace(name="heat_step-1"), study=study,
                                   ab=None, speedup=1.0, directory=Path("t"))
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: result)
    demo_cmd.run(_args())
    out = " ".join(capsys.readouterr().out.split())
    assert "2. tuned heat_step-1: 1 evaluations, each compiled, verified and timed (2 cache " \
           "hits not counted" in out
    assert (said in out) if said else "stopped before its trials" not in out


def test_demo_says_when_the_confirmation_runs_left_every_winner_out(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    result = _result(0, deployed=False)
    winner = SimpleNamespace(recording=SimpleNamespace(source=SimpleNamespace(
        entry="heat_stencil")))
    noisy = SimpleNamespace(recording=SimpleNamespace(source=SimpleNamespace(entry="bnd")))
    result.confirming, result.not_deployed = 2, []
    result.confirmed = [SimpleNamespace(winner=winner, e2e=_e2e([0.95] * 8, 20), kept=False),
                        SimpleNamespace(winner=noisy, e2e=_e2e(
                            [0.9, 1.3, 1.0, 1.2, 0.95, 1.1, 1.05, 1.0], 20), kept=False)]
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: result)
    rc = demo_cmd.run(_args())
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0, out
    assert ("heat_stencil alone in the application (8 interleaved rounds, 20 launches "
            "replaced): not faster: 0.950x [99% CI 0.950, 0.950], slower beyond the 2% noise "
            "band: left out") in out
    # rounds that disagree are inconclusive, with what to do: never "slower"
    assert ("bnd alone in the application (8 interleaved rounds, 20 launches replaced): "
            "inconclusive: 1.025x [99% CI 0.900, 1.300] after 8 passes") in out
    assert "measure again on a quieter machine or with more passes: left out" in out
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


def test_end_to_end_has_the_speed_verdict_of_its_rounds() -> None:
    """Issue 43: the demo's deploy decisions use the one verdict (confirm_each keeps a winner
    only on "faster"); three rounds are too few for a 99% interval: inconclusive, and the
    demo's default rounds are enough for one."""
    e = _e2e([1.3, 1.25, 1.35], 5)
    assert e.judgement.verdict.value == "inconclusive" and "too few" in e.judgement.reason
    assert e.ci == (1.25, 1.35)  # the range: all that three rounds give
    e = _e2e([1.3, 1.25, 1.35, 1.3, 1.28, 1.32, 1.3], 5)
    assert "too few" in e.judgement.reason and "at least 8" in e.judgement.reason
    e = _e2e([1.3, 1.25, 1.35, 1.3, 1.28, 1.32, 1.3, 1.31], 5)
    assert e.judgement.faster and e.ci == (1.25, 1.35)
    from kernforge.pipeline.demo_deploy import ROUNDS

    assert len(e.ratios) == ROUNDS and _args().rounds == _args().confirm_rounds == ROUNDS


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
