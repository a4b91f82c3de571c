"""The command line of a Python application (``python [OPTIONS] app.py ARGS``), as
``kernforge record`` and ``kernforge run`` read it, and the application run in-process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.pipeline.run_app import (
    is_python_application,
    parse_python,
    record_command,
    run_application,
)

FLAGS = ("import json, sys; json.dump({'argv': sys.argv, 'dev': sys.flags.dev_mode, "
         "'optimize': sys.flags.optimize, 'warnoptions': sys.warnoptions, "
         "'write_through': sys.stdout.write_through}, open(sys.argv[1], 'w'))\n")


@pytest.fixture
def app(tmp_path: Path) -> Path:
    path = tmp_path / "app.py"
    path.write_text(FLAGS)
    return path


@pytest.mark.parametrize(("words", "options"), [
    (["-u", "-X", "dev", "-W", "ignore", "-OO"], ("-u", "-Xdev", "-Wignore", "-O", "-O")),
    (["-uB", "-Xdev", "-Wd"], ("-u", "-B", "-Xdev", "-Wd")),
    (["-E", "-s", "-I", "--"], ("-E", "-s", "-I")),
    ([], ())])
def test_the_interpreters_options_come_before_the_script(app: Path, words: list[str],
                                                         options: tuple[str, ...]) -> None:
    for python in (["python"], ["/usr/bin/python3.11"]):
        py = parse_python([*python, *words, str(app), "-u", "x"])
        assert py.options == options and py.kind == "path" and py.target == str(app)
        assert py.argv == [str(app), "-u", "x"] == py.program  # the app's own -u stays its


def test_a_module_after_the_options() -> None:
    py = parse_python(["python", "-u", "-m", "json.tool", "--indent", "2"])
    assert (py.options, py.kind, py.target) == (("-u",), "module", "json.tool")
    assert py.argv == ["json.tool", "--indent", "2"]
    assert py.program == ["-m", "json.tool", "--indent", "2"]
    assert parse_python(["python", "-mjson.tool"]).target == "json.tool"


@pytest.mark.parametrize(("words", "named"), [(["-c", "print(1)"], "'-c'"), (["-S"], "'-S'"),
                                              (["-i"], "'-i'"), (["--help"], "'--help'"),
                                              (["-uq", "-x"], "'-x'")])
def test_an_unsupported_option_is_named_with_the_supported_ones(app: Path, words: list[str],
                                                                named: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_python(["python", *words, str(app)])
    assert f"python option {named} is not supported" in err.value.message
    assert "-u, -B, -O, -OO, -E, -s, -I" in (err.value.hint or "")
    assert "-W ARG, -X OPT" in (err.value.hint or "")


def test_options_without_a_script(app: Path) -> None:
    with pytest.raises(ConfigError, match="no application script given"):
        parse_python(["python", "-u"])
    with pytest.raises(ConfigError, match="needs an argument"):
        parse_python(["python", "-X"])
    with pytest.raises(ConfigError, match="application script 'missing.py' not found"):
        parse_python(["python", "-u", "missing.py"])


def test_in_this_process_the_options_cannot_apply(app: Path) -> None:
    with pytest.raises(ConfigError, match="-u cannot apply to an application run in this"):
        run_application(["python", "-u", str(app)])


def test_record_gives_the_options_to_the_applications_interpreter(
        app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # what -u does shows
    seen = tmp_path / "flags.json"
    status, units, _, _ = record_command(["python", "-u", "-X", "dev", "-W", "ignore", "-O",
                                          str(app), str(seen)], tmp_path / "rec")
    assert status == 0 and units == []
    flags = json.loads(seen.read_text())
    assert flags["argv"] == [str(app), str(seen)]
    assert flags["dev"] is True and flags["optimize"] == 1 and flags["write_through"] is True
    assert flags["warnoptions"][-1] == "ignore"


def test_a_module_in_the_current_directory_runs_as_with_python_m(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kf_local_app.py").write_text(FLAGS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert run_application(["python", "-m", "kf_local_app", "flags.json"]) == 0
    assert json.loads((tmp_path / "flags.json").read_text())["argv"][1] == "flags.json"


def test_which_commands_are_python_applications(app: Path, tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\necho 1\n")
    # what pip writes when the interpreter's path is too long for a #! line
    launcher = tmp_path / "train"
    launcher.write_text("#!/bin/sh\n'''exec' /a/very/long/path/bin/python \"$0\" \"$@\"\n"
                        "' '''\nimport sys\nprint(sys.argv)\n")
    bare = tmp_path / "bare"
    bare.write_text("import sys\nprint(sys.argv)\n")
    one_word = tmp_path / "one.sh"
    one_word.write_text("#!/bin/sh\ntrue\n")  # valid Python after its #! line, yet a shell's
    for cmd in (["python", "x"], [str(app)], ["-m", "json.tool"], ["-u", str(app)],
                [str(script)], ["missing.py"], [str(launcher)], [str(bare)]):
        assert is_python_application(cmd), cmd
    for cmd in (["/bin/true"], [str(shell)], ["./heat2d", "4096"], [str(tmp_path)],
                [str(one_word)]):
        assert not is_python_application(cmd), cmd


def test_a_module_that_python_m_would_not_find_is_an_error_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="python -m kf_no_such_app.main: no module named "
                                          "'kf_no_such_app'") as err:
        parse_python(["python", "-m", "kf_no_such_app.main"])
    assert str(tmp_path) in (err.value.hint or "")
    (tmp_path / "kf_here_app.py").write_text("")  # found in the current directory, as by python
    assert parse_python(["python", "-m", "kf_here_app"]).target == "kf_here_app"
    with pytest.raises(ConfigError, match="no module named 'kf_here_app'"):
        parse_python(["python", "-P", "-m", "kf_here_app"])  # -P: not on the path
    assert "kf_here_app" not in sys.modules  # looked up, not imported


def test_an_option_without_its_value_says_how_to_give_it() -> None:
    for letter, example in (("m", "-m package.module"), ("X", "-X dev app.py")):
        with pytest.raises(ConfigError) as err:
            parse_python(["python", f"-{letter}"])
        assert example in (err.value.hint or "")


def test_an_exit_with_a_message_prints_it_as_python_does(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "exits.py"
    app.write_text("import sys\nsys.exit(sys.argv[1] if sys.argv[1] != 'none' else None)\n")
    assert run_application(["python", str(app), "fatal: no input"]) == 1
    assert capfd.readouterr().err == "fatal: no input\n"
    assert run_application(["python", str(app), "none"]) == 0
    app.write_text("import sys\nsys.exit(3)\n")
    assert run_application(["python", str(app)]) == 3
    assert capfd.readouterr().err == ""
