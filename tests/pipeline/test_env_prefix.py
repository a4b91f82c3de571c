"""``env [-i] [-u NAME]... [NAME=VALUE]... python app.py`` under ``kernforge record``: read as
env reads it, and the Python application run under the in-process capture with env's
environment (before, only a command that was itself python got that capture)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.pipeline.env_prefix import EnvPrefix, split_env
from kernforge.pipeline.run_app import (
    command_program,
    env_command,
    record_command,
    runs_in_process,
)
from kernforge.record import load_recording
from kernforge.testing.fakedriver import FakeCuda

APP = '''import json, os, sys
import numpy as np
import kernforge
json.dump({k: os.environ.get(k) for k in ("KF_T_SET", "KF_T_KEPT", "KF_T_GONE")},
          open(sys.argv[1], "w"))
k = kernforge.Kernel("def twice(x: 'const double *', y: 'double *', n: 'int') -> None:\\n"
                     "    y[:n] = 2 * x[:n]\\n", "twice", backend="null")
k(np.ones(8), np.zeros(8), 8)
'''


@pytest.mark.parametrize(("words", "prefix", "rest"), [
    (["FOO=1", "python", "a.py"], EnvPrefix(assign=(("FOO", "1"),)), ["python", "a.py"]),
    (["-i", "A=x=y", "B=", "app.py"], EnvPrefix(True, (), (("A", "x=y"), ("B", ""))),
     ["app.py"]),
    (["-u", "X", "-uY", "--unset=Z", "--unset", "W", "-i", "python"],
     EnvPrefix(True, ("X", "Y", "Z", "W")), ["python"]),
    (["-iuX", "--", "-u", "python"], EnvPrefix(True, ("X",)), ["-u", "python"]),
    # '-' is -i and ends the options, as getopt takes it for a word
    (["-uX", "-", "A=1", "-u", "python"], EnvPrefix(True, ("X",), (("A", "1"),)),
     ["-u", "python"]),
    (["--ignore-env", "--uns=X", "./app"], EnvPrefix(True, ("X",)), ["./app"]),  # getopt's
    # env's other options, each with its argument: the command is the word after them
    (["-C", "/tmp", "python", "a.py"], EnvPrefix(unsupported="-C"), ["python", "a.py"]),
    (["-C/tmp", "-i", "./x.sh", "a.py"], EnvPrefix(True, unsupported="-C"), ["./x.sh", "a.py"]),
    (["--chdir=/tmp", "python"], EnvPrefix(unsupported="--chdir=/tmp"), ["python"]),
    (["--chdir", "/tmp", "-a", "name", "./app"], EnvPrefix(unsupported="--chdir"), ["./app"]),
    (["-vP", "/opt/bin", "-0", "X=1", "app"], EnvPrefix(False, (), (("X", "1"),), "-v"),
     ["app"]),
    (["--default-signal", "--block-signal=INT", "--debug", "./app"],
     EnvPrefix(unsupported="--default-signal"), ["./app"]),
    # -S: the string split into words, its options read as env reads them
    (["-S", "-i A=1 python -u", "a.py"], EnvPrefix(True, (), (("A", "1"),), "-S"),
     ["python", "-u", "a.py"]),
    (["--split-string=./x.sh 'a b'"], EnvPrefix(unsupported="--split-string=./x.sh 'a b'"),
     ["./x.sh", "a b"]),
    # an option env does not have: the reading ends there
    (["-u", "X", "--frob", "python"], EnvPrefix(False, ("X",), (), "--frob", True), ["python"]),
    (["-Z", "python"], EnvPrefix(unsupported="-Z", unknown=True), ["python"]),
    (["--debug=1", "python"], EnvPrefix(unsupported="--debug=1", unknown=True), ["python"]),
])
def test_env_is_read_as_env_reads_it(words: list[str], prefix: EnvPrefix,
                                     rest: list[str]) -> None:
    for env in ("env", "/usr/bin/env"):
        assert split_env([env, *words]) == (prefix, rest)
    assert split_env(["python", "env"]) == (None, ["python", "env"])


@pytest.mark.parametrize(("words", "said"), [
    (["-u"], "env -u names no variable"), (["--unset"], "env --unset names no variable"),
    (["--unset=", "python", "a.py"], "env --unset= names no variable"),
    (["-u", "", "./app"], "env -u names no variable"),
    (["-u", "A=B", "./app"], "env cannot unset 'A=B'"), (["-uA=", "./app"], "cannot unset 'A='"),
    (["--unset=A=B", "./app"], "env cannot unset 'A=B'"),
])
def test_an_unset_without_a_name_is_refused_as_env_refuses_it(words: list[str],
                                                                said: str) -> None:
    with pytest.raises(ConfigError) as err:
        split_env(["env", *words])
    assert said in err.value.message
    assert err.value.hint is not None and "-u NAME" in err.value.hint


def test_the_prefix_changes_the_environment_as_env_does() -> None:
    base = {"A": "1", "B": "2", "C": "3"}
    assert EnvPrefix(False, ("A", "Q"), (("B", "x"), ("B", "y"))).apply(base) == \
        {"B": "y", "C": "3"}
    assert EnvPrefix(True, (), (("D", "4"),)).apply(base) == {"D": "4"}
    assert base == {"A": "1", "B": "2", "C": "3"}


def test_env_after_env_is_one_prefix_that_changes_the_environment_as_both_do() -> None:
    base = {"A": "1", "B": "2", "C": "3"}
    outers = [EnvPrefix(), EnvPrefix(True, (), (("A", "x"),)),
              EnvPrefix(False, ("C",), (("B", "y"), ("D", "4")))]
    inners = [EnvPrefix(), EnvPrefix(False, ("B", "A"), (("E", "5"),)),
              EnvPrefix(True, (), (("F", "6"),))]
    for outer in outers:
        for inner in inners:
            assert outer.then(inner).apply(base) == inner.apply(outer.apply(base))
    assert env_command(["env", "A=1", "B=0", "env", "-u", "A", "B=2", "python", "a.py"]) == \
        (EnvPrefix(False, ("A",), (("B", "0"), ("B", "2"))), ["python", "a.py"])


def test_which_commands_run_under_the_in_process_capture(tmp_path: Path) -> None:
    for cmd in (["python", "a.py"], ["env", "F=1", "python3", "a.py"], ["env", "-i", "a.py"],
                ["/usr/bin/env", "-u", "F", "python", "-m", "x"],
                ["env", "env", "python", "a.py"], ["env", "A=1", "env", "-i", "a.py"]):
        assert runs_in_process(cmd), cmd
    for cmd in (["./app.sh"], ["env", "F=1", "./app.sh"], ["/bin/true"],
                ["env", "-C", str(tmp_path), "./heat2d"]):
        assert not runs_in_process(cmd), cmd


def test_env_is_applied_by_kernforge_before_any_command() -> None:
    """env -i ./app, env -u LD_PRELOAD ./app: env applying them itself would remove the
    interposer's environment; kernforge applies them and adds the interposer's."""
    assert env_command(["env", "F=1", "./app.sh"]) == \
        (EnvPrefix(assign=(("F", "1"),)), ["./app.sh"])
    assert env_command(["env", "-i", "-u", "LD_PRELOAD", "./app", "x"]) == \
        (EnvPrefix(True, ("LD_PRELOAD",)), ["./app", "x"])
    assert command_program(["/usr/bin/env", "-i", "X=1", "env", "-u", "Y", "./app"]) == "./app"


def test_env_with_another_option_runs_a_command_that_is_not_python_as_given(
        tmp_path: Path) -> None:
    """Only the word env runs decides whether the command is Python: a script's argument
    named a.py, -C's directory or -S's string do not."""
    for cmd in (["env", "-C", str(tmp_path), "./x.sh", "a.py"],
                ["env", "-S", "./x.sh a.py", "python"], ["env", "--chdir", "a.py", "./x"],
                ["env", "-C", "/tmp", "-u", "HOME", "X=1", "./x", "python"],
                ["env", "--frob", "./x"]):
        assert env_command(cmd) == (None, cmd)
        assert not runs_in_process(cmd), cmd
    assert command_program(["env", "-C", str(tmp_path), "./x.sh", "a.py"]) == "./x.sh"
    assert command_program(["env", "--frob", "x", "./x"]) == "env"  # not known which


def test_an_env_option_kernforge_would_not_apply_before_python_is_refused() -> None:
    for words, word in ((["-C", "/tmp", "python", "app.py"], "-C"),
                        (["-S", "python app.py"], "-S"), (["-0", "python", "app.py"], "-0"),
                        (["--chdir=/tmp", "app.py"], "--chdir=/tmp"),
                        (["--debug", "X=1", "python3"], "--debug"),
                        (["-P", "/usr/bin", "python", "app.py"], "-P"),
                        (["-S", "X=1 env -C /tmp python", "a.py"], "-C"),
                        (["--frob", "/tmp", "python", "app.py"], "--frob")):  # may be python
        with pytest.raises(ConfigError) as err:
            env_command(["env", *words])
        assert f"env option '{word}' is not supported" in err.value.message
        assert err.value.hint is not None and "-u NAME" in err.value.hint


def test_env_with_another_option_that_would_remove_the_interposer_is_refused() -> None:
    for words, said in ((["-C", "/tmp", "-i", "./app"], "env -i "),
                        (["-v", "-u", "LD_PRELOAD", "./app"], "env -u LD_PRELOAD "),
                        (["--chdir", "/tmp", "--unset=KERNFORGE_RECORD_DIR", "./app"],
                         "env -u KERNFORGE_RECORD_DIR "),
                        (["-C", "/tmp", "LD_PRELOAD=", "./app"], "env LD_PRELOAD= "),
                        (["-i", "--frob", "./app"], "env -i "),
                        (["-C", "/tmp", "env", "-i", "./app"], "env -i ")):
        with pytest.raises(ConfigError) as err:
            env_command(["env", *words])
        assert err.value.message.startswith(said + "would remove the interposer's environment")
        assert f"the option {words[0]!r}, which kernforge does not apply" in \
            err.value.message or words[0] == "-i"
        assert err.value.hint is not None and err.value.hint.startswith("leave out")
    with pytest.raises(ConfigError) as err:
        env_command(["env", "-C", "/tmp", "-i", "./app"])
    assert err.value.hint is not None and "cd DIR first" in err.value.hint


def test_env_without_a_command_is_refused() -> None:
    """env alone prints the environment, the interposer's included; env -u X exits 125."""
    for cmd in (["env"], ["env", "-i"], ["env", "-u", "X"], ["/usr/bin/env", "A=1"],
                ["env", "-C", "/tmp"], ["env", "--", "A=1"], ["env", "X=1", "env", "-i"]):
        with pytest.raises(ConfigError) as err:
            env_command(cmd)
        assert "is given no command to run" in err.value.message
        assert err.value.hint is not None and "env NAME=VALUE... ./app" in err.value.hint


def test_record_runs_the_python_application_with_envs_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    seen = tmp_path / "env.json"
    monkeypatch.setenv("KF_T_KEPT", "kept")
    monkeypatch.setenv("KF_T_GONE", "gone")
    for n, env in enumerate((["env", "-u", "KF_T_GONE", "KF_T_SET=1"],
                             ["env", "-i", "KF_T_SET=1"])):
        status, units, problems, _ = record_command([*env, sys.executable, str(app),
                                                     str(seen)], tmp_path / f"rec{n}")
        assert status == 0 and not problems
        assert [load_recording(u).source.entry for u in units] == ["twice"]
        assert json.loads(seen.read_text()) == {
            "KF_T_SET": "1", "KF_T_KEPT": None if "-i" in env else "kept", "KF_T_GONE": None}


def test_record_applies_envs_prefix_before_a_native_program(on_fake: FakeCuda,
                                                          tmp_path: Path) -> None:
    """env -i and env -u LD_PRELOAD, applied by env itself, removed the interposer's
    environment: nothing was recorded. env -i PATH=DIR app finds DIR's app, as env does."""
    app, *args = on_fake.command(2)
    lib = f"LD_LIBRARY_PATH={on_fake.libdir}"
    for n, cmd in enumerate((["env", "-u", "LD_PRELOAD", "KF_T=1", app],
                             ["env", "-i", lib, app],
                             ["env", "-i", lib, f"PATH={Path(app).parent}", "env", "-u",
                              "KERNFORGE_SKIP", Path(app).name])):
        status, units, problems, summaries = record_command(
            [*cmd, *args], tmp_path / f"r{n}", kernels="heat", max_instances=1)
        assert status == 0 and not problems, cmd
        assert [u.name for u in units] == ["heat-0"], cmd
        assert sum(s["launches"] for s in summaries) > 0


def test_record_runs_a_command_after_envs_other_options_as_given(tmp_path: Path) -> None:
    """env -C DIR ./x.sh a.py: not a Python command (a.py is the script's argument); env
    runs it in DIR with the interposer's environment."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "x.sh"
    script.write_text('#!/bin/sh\necho "$PWD $1 $KF_T ${KERNFORGE_RECORD_DIR:+set}" > seen\n'
                      "exit 3\n")
    script.chmod(0o755)
    status, units, problems, _ = record_command(
        ["env", "-C", str(work), "KF_T=1", "./x.sh", "a.py"], tmp_path / "rec")
    assert (status, units, problems) == (3, [], [])
    assert (work / "seen").read_text().split() == [str(work), "a.py", "1", "set"]
