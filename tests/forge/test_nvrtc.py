"""forge/nvrtc.py: the parallel build as dispatch builds (worker processes, spawned). On the
CPU the worker is a stand-in (CuPy's NVRTC needs the GPU machine; tests/forge/test_sessions_gpu.py
runs the real one there): the plumbing, deduplication, failures and a dying worker are real."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from pathlib import Path

import pytest

from kernforge.forge.nvrtc import build_deployed
from kernforge.stencil import matrix as mx
from kernforge.stencil.operator import Operator
from kernforge.stencil.spec import Cell

CELL = Cell.parse("star_1/40x20x16/fp32")


def stand_in(source: str, options: tuple[str, ...]) -> tuple[bool, str, float]:
    """Runs in a spawned worker: notes each call in the folder named on the source's first
    line, fails a source that says BAD, dies on one that says CRASH."""
    folder = Path(source.splitlines()[0][3:])
    (folder / f"{os.getpid()}-{uuid.uuid4().hex}").write_text(" ".join(options))
    if "CRASH" in source:
        os._exit(3)
    if "HANG" in source:
        time.sleep(120)
    if "BAD" in source:
        return False, "error: BAD on line 2", 0.01
    if "NOCUPY" in source:
        return False, "BackendUnavailableError: cupy is not installed", 0.0
    return True, "", 0.01


def _ops(folder: Path, *marks: str) -> list[Operator]:
    ops = []
    for i, mark in enumerate(marks):
        op = mx.build("zmarch", CELL, {**mx.defaults("zmarch", CELL), "lz": 4 + i % 3})
        assert op is not None
        ops.append(dataclasses.replace(op, source=f"// {folder}\n// {mark}\n{op.source}"))
    return ops


def test_builds_each_source_once_in_input_order(tmp_path: Path) -> None:
    ops = _ops(tmp_path, "a", "b", "BAD", "a")  # the 4th: the 1st's lz and mark, one build
    assert ops[0].source == ops[3].source and ops[0].key == ops[3].key
    built = build_deployed(ops, jobs=2, work=stand_in)
    assert [b.op for b in built] == ops
    assert [b.ok for b in built] == [True, True, False, True]
    assert built[0].deployed and built[0].cubin is None and not built[2].deployed
    assert "BAD on line 2" in built[2].log
    calls = list(tmp_path.iterdir())
    assert len(calls) == 3  # deduplicated by source and options
    assert {c.read_text() for c in calls} == {" ".join(ops[0].options)}


@pytest.mark.slow
def test_a_dying_worker_fails_its_operator_alone(tmp_path: Path) -> None:
    """A crash breaks the whole pool; the unfinished operators are built again in halves, so
    only the one that crashed fails."""
    ops = _ops(tmp_path, "a", "b", "c", "CRASH", "d", "e")
    built = build_deployed(ops, jobs=2, work=stand_in)
    assert [b.ok for b in built] == [True, True, True, False, True, True]
    assert "died" in built[3].log and built[0].deployed
    assert build_deployed([], work=stand_in) == []


@pytest.mark.slow
def test_a_hung_build_times_out_alone(tmp_path: Path) -> None:
    t0 = time.monotonic()
    built = build_deployed(_ops(tmp_path, "HANG", "a", "b"), jobs=2, work=stand_in,
                           timeout_s=3)
    assert [b.ok for b in built] == [False, True, True]
    assert "timed out after 3 s" in built[0].log
    assert time.monotonic() - t0 < 60  # the hung worker was killed, not waited for


@pytest.mark.slow
def test_workers_that_cannot_build_at_all_stop_the_run(tmp_path: Path) -> None:
    import pytest

    from kernforge.core import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="cupy is not installed") as exc:
        build_deployed(_ops(tmp_path, "NOCUPY a", "NOCUPY b"), jobs=2, work=stand_in)
    assert "--build nvcc" in (exc.value.hint or "")
    # different compile errors are the operators' own: reported per operator, no stop
    built = build_deployed(_ops(tmp_path, "BAD", "NOCUPY"), jobs=2, work=stand_in)
    assert not any(b.ok for b in built)


@pytest.mark.slow
def test_an_unknown_build_is_refused_before_anything_runs(tmp_path: Path) -> None:
    import pytest

    from kernforge.core import ConfigError
    from kernforge.forge.run import forge_run

    with pytest.raises(ConfigError, match="nvrtc, nvcc"):
        forge_run([CELL], tmp_path / "out", start_table=None, rounds=1, build="clang")
    assert not (tmp_path / "out").exists()
    res = __import__("subprocess").run(
        [__import__("sys").executable, "-m", "kernforge", "stencil", "forge", "--emulate",
         "--shapes", "40x20x16", "--stencils", "star_1", "--precisions", "fp32",
         "--build", "clang", "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 2 and "invalid choice: 'clang'" in res.stderr
