"""Bad input is caught before any work, as a typed error with exit 2 (issue 32, item 5): the
reproductions of the issue, each through the real command on a real CPU recording."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernforge
from kernforge.core import ConfigError
from kernforge.core.lock import directory_lock
from kernforge.harness.ledger import Ledger
from kernforge.record import find_recordings

from .cli_helpers import run

SCALE = r"""
#ifndef FACTOR
#define FACTOR 2.0
#endif
void scale(const double *restrict x, double *restrict y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = FACTOR * x[i];
}
"""


@pytest.fixture(scope="module")
def rec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checks") / "rec"
    k = kernforge.Kernel(SCALE, "scale", backend="cpu")
    x = np.arange(256.0)
    with kernforge.record(root):
        k(x, np.zeros(256), 256)
        k(x, np.ones(256), 256)
    return root


def test_a_define_the_source_never_references_is_an_error(rec_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert run("replay", str(rec_dir), "--in-process", "--define", "NOSUCH_MACRO=1") == 2
    err = capsys.readouterr().err
    assert "NOSUCH_MACRO" in err and "never references" in err and "--allow-unused" in err
    # the warning form measures (the unchanged kernel) and says so
    assert run("replay", str(rec_dir), "--in-process", "--repeat", "1", "--define",
               "NOSUCH_MACRO=1", "--allow-unused-define") == 0
    assert "warning" in capsys.readouterr().err
    # a define the source does use is fine
    assert run("replay", str(rec_dir), "--in-process", "--repeat", "1",
               "--define", "FACTOR=2.0") == 0


@pytest.mark.parametrize("argv", [("--threads", "0"), ("--threads", "100000"),
                                  ("--repeat", "0"), ("--warmup", "-1"), ("--repeat", "x")])
def test_numeric_arguments_out_of_range_exit_2(rec_dir: Path, argv: tuple[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run("replay", str(rec_dir), "--in-process", *argv) == 2
    assert argv[0] in capsys.readouterr().err


def test_threads_beyond_the_limit_are_a_config_error_in_the_library() -> None:
    with pytest.raises(ConfigError, match="between 1 and"):
        kernforge.LaunchConfig(threads=100000)


def test_tune_numeric_arguments(rec_dir: Path, tmp_path: Path) -> None:
    for argv in (("--trials", "0"), ("--repeat", "0"), ("--patience", "0"),
                 ("--seconds", "-1")):
        assert run("tune", str(rec_dir), "--out", str(tmp_path / "t"), *argv) == 2, argv


def test_unknown_option_is_bad_input_like_a_malformed_one(rec_dir: Path) -> None:
    assert run("replay", str(rec_dir), "--in-process", "--opt", "nosuch=1") == 2
    assert run("replay", str(rec_dir), "--in-process", "--opt", "bad") == 2
    unit = next(p for p in rec_dir.rglob("manifest.json")).parent
    assert run("integrity", "validate", str(unit), "--in-process", "--opt", "nosuch=1") == 2


@pytest.mark.parametrize("where", ["/proc/kernforge-x.json", "{file}/x.json", "{dir}"])
def test_unwritable_json_fails_before_the_replay(rec_dir: Path, tmp_path: Path, where: str,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("")
    path = where.format(file=tmp_path / "afile", dir=tmp_path)

    def no_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("a unit was replayed before --json was checked")
    monkeypatch.setattr("kernforge.pipeline.units.replay_unit", no_replay)
    assert run("replay", str(rec_dir), "--in-process", "--json", path) == 2
    out = capsys.readouterr()
    assert "--json" in out.err and "Traceback" not in out.err
    assert "replay of" not in out.out  # nothing was replayed


def test_unwritable_out_fails_before_tuning(rec_dir: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    assert run("tune", str(rec_dir), "--out", str(tmp_path / "afile" / "run")) == 2
    assert run("tune", str(rec_dir), "--out", "/proc/kernforge-run") == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["tune", "evolve"])
@pytest.mark.parametrize("where", ["the recordings", "one unit"])
def test_a_run_is_never_written_into_the_recordings(rec_dir: Path, command: str, where: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``tune rec --out rec`` wrote result.json, study.db and history.png into the recorded
    units' own directories."""
    out = rec_dir if where == "the recordings" else rec_dir / "scale-0"
    before = sorted(p.relative_to(rec_dir) for p in rec_dir.rglob("*"))
    config = (["--config", str(Path(__file__).parents[2] / "examples" / "evolve-cpu.yaml")]
              if command == "evolve" else [])
    assert run(command, str(rec_dir), *config, "--out", str(out)) == 2
    assert "holds recorded units" in capsys.readouterr().err
    assert sorted(p.relative_to(rec_dir) for p in rec_dir.rglob("*")) == before


def test_missing_and_non_utf8_ledgers(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    assert run("integrity", "ledger", str(tmp_path / "missing.jsonl")) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"case": "\xff\xfe"}\n')
    assert run("integrity", "ledger", str(bad)) == 2
    err = capsys.readouterr().err
    assert "unreadable" in err and "Traceback" not in err
    assert Ledger(tmp_path / "missing.jsonl").entries() == []  # appending to a new one is fine


def test_a_second_process_on_a_locked_directory_stops(tmp_path: Path) -> None:
    code = ("import sys, time; from kernforge.core.lock import directory_lock\n"
            "with directory_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"), directory_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with directory_lock(tmp_path):  # released by the kernel when the holder died (kill -9)
        pass


def test_tune_on_a_locked_out_exits_2(rec_dir: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with directory_lock(tmp_path / "run"):
        assert run("tune", str(rec_dir), "--out", str(tmp_path / "run"), "--trials", "1") == 2
    assert "in use by another kernforge process" in capsys.readouterr().err


def test_a_damaged_unit_is_skipped_when_others_remain(rec_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    copy = tmp_path / "rec"
    shutil.copytree(rec_dir, copy)
    units = sorted(p for p in copy.iterdir() if p.is_dir())
    (units[0] / "manifest.json").write_text("{ damaged")
    assert run("inspect", str(copy)) == 7  # the healthy unit shown, the skip in the status
    assert "skipped a damaged unit" in capsys.readouterr().err
    assert run("replay", str(copy), "--in-process", "--repeat", "1") == 7
    out = capsys.readouterr()
    assert units[1].name in out.out and "skipped a damaged unit" in out.err
    shutil.rmtree(units[1])  # nothing usable left: the damage is the error
    assert run("inspect", str(copy)) == 4


def test_result_files_are_not_private(tmp_path: Path) -> None:
    from kernforge.core.jsonio import write_json_atomic

    old = os.umask(0o022)
    try:
        path = write_json_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_non_utf8_space_and_config_files_are_config_errors(rec_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    space = tmp_path / "space.yaml"
    space.write_bytes(b"def.X: \xff\xfe\n")
    assert run("tune", str(rec_dir), "--space", str(space), "--out", str(tmp_path / "t")) == 2
    cfg = tmp_path / "evolve.yaml"
    cfg.write_bytes(b"evolve: \xff\n")
    assert run("evolve", str(rec_dir), "--config", str(cfg), "--out", str(tmp_path / "e")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unreadable" in err
    space.write_text("def.X: {ordinal: [4, 8], defualt: 4}\n")  # a misspelled key
    assert run("tune", str(rec_dir), "--space", str(space), "--out", str(tmp_path / "t2")) == 2
    err = capsys.readouterr().err
    assert f"space file {space}" in err and "def.X" in err


def test_a_non_utf8_candidate_source_is_a_config_error(rec_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """A Latin-1 comment in a candidate (old HPC code) was a UnicodeDecodeError traceback."""
    cand = tmp_path / "cand.c"
    cand.write_bytes(SCALE.replace("#ifndef", "/* d\xe9j\xe0 vu */\n#ifndef").encode("latin-1"))
    unit = str(find_recordings(rec_dir)[0])
    for argv in (["integrity", "validate", unit, "--source", str(cand)],
                 ["integrity", "lint", str(cand)]):
        assert run(*argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"cannot read {cand}: it is not UTF-8 text (byte 0xe9 at offset" in err
        assert "iconv -f latin1 -t utf-8" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["stencil", "check", "--compile-only", "--json"],
                                  ["stencil", "spread", "a.json", "--png"]])
def test_stencil_outputs_are_checked_first(argv: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    code = run(*argv, str(tmp_path / "afile" / "out"))
    assert code == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_the_max_error_column_names_a_buffer_only_when_one_differs() -> None:
    from kernforge.cli.output import fmt_error
    from kernforge.core import BufferCheck, Measurement, Status

    same = Measurement(Status.OK, checks=(BufferCheck("u", True, "bitwise", 8),
                                          BufferCheck("v", True, "bitwise", 8)))
    assert fmt_error(same) == "0 (bitwise)"
    near = Measurement(Status.OK, checks=(BufferCheck("u", True, "bitwise", 8),
                                          BufferCheck("v", True, "rel", 8, max_abs=3e-7)))
    assert fmt_error(near) == "3.00e-07 (v)"
    bad = Measurement(Status.WRONG_RESULT, checks=(
        BufferCheck("u", False, "bitwise", 8, mismatches=1, max_abs=1e-9),
        BufferCheck("v", True, "rel", 8, max_abs=3e-7)))
    assert fmt_error(bad) == "1.00e-09 (u)"
    assert fmt_error(Measurement(Status.OK)) == "-"


def test_kernels_that_match_nothing_name_the_recorded_ones(rec_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    for cmd in ("replay", "tune"):
        assert run(cmd, str(rec_dir), "--kernels", "nosuch*", "--in-process") == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "matches --kernels 'nosuch*'" in err and "recorded kernels:" in err, err
        assert "recorded kernels: scale" in err
