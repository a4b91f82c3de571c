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
from kernforge.pipeline.run_app import env_python, record_command, runs_in_process
from kernforge.record import load_recording

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
    (["-u", "X", "-uY", "--unset=Z", "--unset", "W", "-", "python"],
     EnvPrefix(True, ("X", "Y", "Z", "W")), ["python"]),
    (["-iuX", "--", "-u", "python"], EnvPrefix(True, ("X",)), ["-u", "python"]),
    (["-C", "/tmp", "python", "a.py"], EnvPrefix(unsupported="-C"), ["/tmp", "python", "a.py"]),
    (["--chdir=/tmp", "python"], EnvPrefix(unsupported="--chdir=/tmp"), ["python"]),
    (["-u"], EnvPrefix(unsupported="-u"), []),
])
def test_env_is_read_as_env_reads_it(words: list[str], prefix: EnvPrefix,
                                     rest: list[str]) -> None:
    for env in ("env", "/usr/bin/env"):
        assert split_env([env, *words]) == (prefix, rest)
    assert split_env(["python", "env"]) == (None, ["python", "env"])


def test_the_prefix_changes_the_environment_as_env_does() -> None:
    base = {"A": "1", "B": "2", "C": "3"}
    assert EnvPrefix(False, ("A", "Q"), (("B", "x"), ("B", "y"))).apply(base) == \
        {"B": "y", "C": "3"}
    assert EnvPrefix(True, (), (("D", "4"),)).apply(base) == {"D": "4"}
    assert base == {"A": "1", "B": "2", "C": "3"}


def test_which_commands_run_under_the_in_process_capture(tmp_path: Path) -> None:
    for cmd in (["python", "a.py"], ["env", "F=1", "python3", "a.py"], ["env", "-i", "a.py"],
                ["/usr/bin/env", "-u", "F", "python", "-m", "x"]):
        assert runs_in_process(cmd), cmd
    for cmd in (["./app.sh"], ["env", "F=1", "./app.sh"], ["env"], ["/bin/true"],
                ["env", "-C", str(tmp_path), "./heat2d"], ["env", "env", "python", "a.py"]):
        assert not runs_in_process(cmd), cmd
        assert env_python(cmd) == (None, cmd)  # run as given, env and all


def test_an_env_option_kernforge_would_not_apply_before_python_is_refused() -> None:
    for word in ("-C", "-S", "-0", "--chdir=/tmp", "--debug"):
        with pytest.raises(ConfigError) as err:
            env_python(["env", word, "/tmp", "python", "app.py"])
        assert f"env option '{word}' is not supported" in err.value.message
        assert err.value.hint is not None and "-u NAME" in err.value.hint


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
