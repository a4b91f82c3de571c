"""The demo's checks before any work: a fresh run directory, a problem it can show."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.pipeline.demo import run_demo
from kernforge.pipeline.demo_checks import check_problem, fresh_run_dir


def test_an_earlier_runs_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "demoint"
    (out / "recordings" / "heat_step-0").mkdir(parents=True)  # an interrupted demo's
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as err:
        run_demo(out, backend="cpu", n=3, steps=2, trials=1, repeat=1, iterations=1,
                 inner_trials=1, rounds=1, confirm_rounds=0)
    assert "is not empty" in err.value.message and "notes.txt, recordings" in err.value.message
    assert "choose another --out" in (err.value.hint or "")
    assert sorted(p.name for p in out.rglob("*")) == ["heat_step-0", "notes.txt", "recordings"]
    assert (out / "notes.txt").read_text() == "mine"


def test_an_absent_or_empty_out_is_used(tmp_path: Path) -> None:
    assert fresh_run_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    assert fresh_run_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"  # still empty
    with pytest.raises(ConfigError, match="not a directory"):
        (tmp_path / "f").write_text("")
        fresh_run_dir(tmp_path / "f")


def test_the_default_run_directory_is_new_each_time(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from kernforge.pipeline import demo_checks

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo_checks.time, "strftime", lambda fmt: "demo-20261203-164500")
    dirs = [fresh_run_dir(None) for _ in range(3)]  # in one second: -2, -3
    assert len(set(dirs)) == 3 and all(d.is_dir() and d.parent == Path("runs") for d in dirs)
    assert [d.name for d in dirs] == ["demo-20261203-164500", "demo-20261203-164500-2",
                                      "demo-20261203-164500-3"]
    got: list[Path] = []  # demos started together: each its own directory
    threads = [threading.Thread(target=lambda: got.append(fresh_run_dir(None)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8


@pytest.mark.parametrize(("n", "steps", "message"), [(2, 20, "n <= 2 has none"),
                                                     (0, 20, "n <= 2 has none"),
                                                     (None, 1, "from its second launch")])
def test_a_problem_the_demo_cannot_show_is_refused(n: int | None, steps: int,
                                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_problem(n, steps)
    check_problem(3, 2)
    check_problem(None, 2)
