"""M4's rounds and verdict at 99% over the looks (issue 43), with the program's runs replaced by
timed callables: the harness's own comparison and ``endtoend.measure`` run unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernforge.apps import endtoend
from kernforge.apps.harness import AppHarness, Setup


class Timed(AppHarness):
    """The harness with each checked run's seconds given: ``seconds[label]`` per run."""

    def __init__(self, datasets: list[str], seconds: dict[str, float]) -> None:
        m: Any = SimpleNamespace(name="app", source=Path("src"),
                                 datasets=[SimpleNamespace(name=d) for d in datasets])
        self.said: list[str] = []
        self.m, self.progress, self.seconds = m, self.said.append, seconds

    def timed(self, dataset: Any, setup: Setup) -> float:
        return self.seconds[setup.label]


def test_two_rounds_asked_take_the_eight_a_verdict_needs() -> None:
    """Two rounds (six at most) cannot give a 99% interval: the first look waits for eight,
    so a clear gain integrates instead of ending INCONCLUSIVE whatever it measured; the
    progress says how many runs are planned."""
    h = Timed(["small", "large"], {"original": 2.0, "deployed": 1.0})
    r = h.compare(h.m.datasets[0], Setup("deployed", Path("src")), 2)
    assert len(r["ratios"]) == 8 and r["verdict"]["verdict"] == "faster"
    assert "[99% CI 2.000, 2.000]" in r["verdict"]["reason"]
    assert any("run 16 of 16 (up to 16 while inconclusive)" in s for s in h.said)
    state, reason, figures = endtoend.measure(h, Setup("deployed", Path("src")), 2, 0.98)
    assert state == "INTEGRATED", reason
    assert figures["verdict"]["passes"] == 8


def test_the_usual_rounds_look_at_10_17_and_21() -> None:
    h = Timed(["small"], {"original": 1.0, "deployed": 1.0})
    r = h.compare(h.m.datasets[0], Setup("deployed", Path("src")), 7)
    assert len(r["ratios"]) == 10 and r["verdict"]["verdict"] == "not faster"
    assert r["confidence"] == 1 - 0.01 / 3
    assert any("run 20 of 20 (up to 42 while inconclusive)" in s for s in h.said)


def test_rounds_too_few_for_the_interval_are_inconclusive_never_slower() -> None:
    """Figures of rounds too few for the interval (older runs, or datasets with fewer rounds
    than the looks need) conclude nothing: INCONCLUSIVE, with what to do."""
    per = {"speedup": 3.0, "ci": [2.9, 3.1], "confidence": 0.99, "ratios": [2.9, 3.0, 3.1],
           "original_s": 3.0, "deployed_s": 1.0}
    h: Any = SimpleNamespace(m=SimpleNamespace(datasets=[SimpleNamespace(name="small")]),
                             compare=lambda d, setup, rounds: dict(per))
    state, reason, _ = endtoend.measure(h, Setup("deployed", Path("src")), 3, 0.98)
    assert state == "INCONCLUSIVE" and "too few" in reason and "e2e_rounds" in reason
    assert "slower" not in reason


class Sleeping(Timed):
    """Each checked run takes ``pause`` seconds of wall clock (asleep: no CPU of its own)."""

    def __init__(self, datasets: list[str], seconds: dict[str, float], pause: float) -> None:
        super().__init__(datasets, seconds)
        self.pause = pause

    def timed(self, dataset: Any, setup: Setup) -> float:
        time.sleep(self.pause)
        return self.seconds[setup.label]


def test_rounds_on_a_busy_machine_are_inconclusive_and_say_what_was_busy() -> None:
    """Other processes kept every core busy during the rounds: M4 is INCONCLUSIVE (a clear
    2x concludes nothing, and a dataset below the floor is not called slower), and the reason
    names the machine, how it was read and how busy it was. Before, M4 never looked and still
    told the user to measure again on an idle machine."""
    spin = "while True: pass"
    others = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        h = Sleeping(["small", "large"], {"original": 2.0, "deployed": 1.0}, 0.02)
        state, reason, figures = endtoend.measure(h, Setup("deployed", Path("src")), 2, 0.98)
        slow = Sleeping(["small"], {"original": 1.0, "deployed": 2.0}, 0.02)
        slow_state, slow_reason, _ = endtoend.measure(slow, Setup("deployed", Path("src")), 2,
                                                      0.98)
    finally:
        for p in others:
            p.kill()
            p.wait()
    assert state == "INCONCLUSIVE", reason
    assert "the machine (/proc/stat during the measurement" in reason and "% busy)" in reason
    assert figures["verdict"]["verdict"] == "inconclusive"
    assert all(d["busy"]["idle"] is False for d in figures["datasets"])
    assert all(d["verdict"]["verdict"] == "inconclusive" for d in figures["datasets"])
    assert slow_state == "INCONCLUSIVE" and "conclusively slower" not in slow_reason, slow_reason
