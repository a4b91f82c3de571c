"""``kernforge run --deploy SPEC -- COMMAND``: which commands a (non-native) spec deploys into,
and the interpreter's own options before the script; the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.core.jsonio import canonical_checksum
from kernforge.deploy import entry_from_recording, write_spec
from kernforge.record import load_recording, record

AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n] + BIAS
'''
APP = f"""import sys
import numpy as np
from kernforge.backends import Kernel
y = np.ones(4)
Kernel({AXPY!r}, "axpy", backend="null", defines={{"BIAS": 0}})(np.arange(4.0), y, 2.0, 4)
print("y", y.tolist(), "dev", sys.flags.dev_mode, "optimize", sys.flags.optimize,
      "write_through", sys.stdout.write_through, "argv", sys.argv[1:])
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spec of the null backend's axpy (n = 4), tuned to BIAS=100: a replaced launch shows."""
    root = tmp_path_factory.mktemp("run-cmd")
    with record(root / "rec") as rec:
        Kernel(AXPY, "axpy", backend="null", defines={"BIAS": 0})(np.arange(4.0), np.ones(4),
                                                                   2.0, 4)
    unit = load_recording(rec.paths[0])
    entry = entry_from_recording(unit, unit.variant.with_(defines={"BIAS": 100}),
                                 baseline_s=2e-3, tuned_s=1e-3, speedup=2.0,
                                 speedup_ci=(1.9, 2.1))
    write_spec(root / "spec.json", [entry])
    (root / "app.py").write_text(APP)
    return root / "spec.json"


def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNFORGE_DEPLOY_VERIFY": "off"}  # BIAS=100 changes results
    env.pop("PYTHONUNBUFFERED", None)  # what -u does shows
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("kind", ["binary", "shell script", "missing program"])
def test_a_python_spec_refuses_a_command_that_is_not_python(spec: Path, tmp_path: Path,
                                                            kind: str) -> None:
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\necho ran\n")
    shell.chmod(0o755)
    cmd = {"binary": "/bin/true", "shell script": str(shell), "missing program": "./heat2d"}
    r = kf("run", "--deploy", str(spec), "--", cmd[kind], "4096", cwd=tmp_path)
    err = " ".join(r.stderr.split())
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "SyntaxError" not in r.stderr
    assert f"error: '{cmd[kind]}' is not a Python application, and {spec} is not a native " \
           f"spec" in err
    assert f"kernforge run --deploy {spec} -- python app.py ARGS" in err
    assert "a native program needs a native spec" in err and "ran" not in r.stdout


def test_without_a_command_the_hint_is_kernforges_run(spec: Path, tmp_path: Path) -> None:
    r = kf("run", "--deploy", str(spec), cwd=tmp_path)
    assert r.returncode == 2 and "no application command given" in r.stderr
    assert "kernforge run --deploy SPEC -- python app.py ARGS" in " ".join(r.stderr.split())
    assert "kernforge record" not in r.stderr


def test_the_interpreters_options_apply_and_the_spec_deploys(spec: Path) -> None:
    app = spec.parent / "app.py"
    plain = kf("run", "--deploy", str(spec), "--", "python", str(app), "-u", cwd=spec.parent)
    assert plain.returncode == 0, plain.stderr
    assert "y [101.0, 103.0, 105.0, 107.0] dev False optimize 0 write_through False" \
        in plain.stdout
    r = kf("run", "--deploy", str(spec), "-q", "--", "python", "-u", "-X", "dev", "-W",
           "ignore", "-O", str(app), "-u", cwd=spec.parent)
    assert r.returncode == 0, r.stderr
    assert ("y [101.0, 103.0, 105.0, 107.0] dev True optimize 1 write_through True argv "
            "['-u']") in r.stdout
    assert "1 launch(es) ran a tuned variant" in r.stderr
    assert "application script '-u' not found" not in r.stderr


def test_an_unsupported_option_names_the_supported_ones(spec: Path) -> None:
    r = kf("run", "--deploy", str(spec), "--", "python", "-c", "print(1)", cwd=spec.parent)
    assert r.returncode == 2 and "python option '-c' is not supported" in r.stderr
    assert "-W ARG, -X OPT" in " ".join(r.stderr.split())


def _app(spec: Path, name: str, tail: str) -> Path:
    path = spec.parent / name
    path.write_text(APP + tail)
    return path


def test_an_application_that_closes_stderr_keeps_its_status_and_report(
        spec: Path, tmp_path: Path) -> None:
    """The report on a closed stderr took the run down ("lost sys.stderr", exit 1): it is
    written only where stderr is usable, the --report file still is, the status is the app's."""
    app = _app(spec, "closes_stderr.py", "sys.stderr.close()\n")
    r = kf("run", "--deploy", str(spec), "--report", str(tmp_path / "r.json"), "--", "python",
           str(app), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "y [101.0, 103.0, 105.0, 107.0]" in r.stdout  # the tuned variant ran
    assert "lost sys.stderr" not in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "r.json").is_file()


def test_the_applications_own_keyboard_interrupt_still_prints_the_report(
        spec: Path, tmp_path: Path) -> None:
    app = _app(spec, "interrupts.py", "raise KeyboardInterrupt\n")
    r = kf("run", "--deploy", str(spec), "--report", str(tmp_path / "r.json"), "--", "python",
           str(app), cwd=tmp_path)
    assert r.returncode == 130, r.stderr
    assert f"kernforge deploy report ({spec}): 1 launch(es) ran a tuned variant" in r.stderr
    assert (tmp_path / "r.json").is_file()


@pytest.mark.parametrize("ending", ["status", "signal"])
def test_with_interpreter_options_the_status_and_signal_are_the_applications(
        spec: Path, tmp_path: Path, ending: str) -> None:
    """The interpreter with the application's options replaces the launcher (nothing runs
    after it): an exit status, or the signal that ended the application, is the command's."""
    tail = ("sys.exit(7)\n" if ending == "status"
            else "import os, signal\nsys.stdout.flush()\nos.kill(os.getpid(), signal.SIGTERM)\n")
    app = _app(spec, f"ends_by_{ending}.py", tail)
    r = kf("run", "--deploy", str(spec), "--", "python", "-X", "dev", str(app), cwd=tmp_path)
    assert r.returncode == (7 if ending == "status" else -signal.SIGTERM), r.stderr
    assert "y [101.0, 103.0, 105.0, 107.0] dev True" in r.stdout  # the tuned variant ran


def test_a_signed_spec_with_a_malformed_entry_leaves_the_application_unchanged(
        spec: Path, tmp_path: Path) -> None:
    """The entries are read when a kernel of the spec first launches (as $KERNFORGE_DEPLOY
    reads them): one that does not parse is said once, and the application runs unchanged."""
    doc = json.loads(spec.read_text())
    del doc["entries"][0]["problem"]["launch"]
    doc.pop("checksum")
    doc["checksum"] = canonical_checksum(doc)  # signed, but not an entry this reader reads
    bad = tmp_path / "malformed.json"
    bad.write_text(json.dumps(doc))
    r = kf("run", "--deploy", str(bad), "--report", "report.json", "--", "python",
           str(spec.parent / "app.py"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "y [1.0, 3.0, 5.0, 7.0]" in r.stdout  # the original ran
    assert json.loads((tmp_path / "report.json").read_text())["deployed"] is False
    assert r.stderr.count(f"{bad} not deployed: ") == 1  # said once, on the log
    assert "entries[0] is malformed" in r.stderr and "KERNFORGE_DEPLOY=" not in r.stderr
    # not "0 launch(es) ran a tuned variant, 1 the original": launches after the failure
    # were not counted
    assert f"kernforge deploy report ({bad}): not deployed (its entries could not be read, " \
           f"as said above): every launch ran the original" in " ".join(r.stderr.split())
    assert "launch(es) ran a tuned variant" not in r.stderr


def test_an_edited_spec_is_an_error_before_the_application_starts(spec: Path,
                                                                   tmp_path: Path) -> None:
    doc = json.loads(spec.read_text())
    doc["entries"][0]["variant"]["defines"]["BIAS"] = "1000"  # the checksum no longer holds
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(doc))
    r = kf("run", "--deploy", str(bad), "--", "python", str(spec.parent / "app.py"),
           cwd=tmp_path)
    assert r.returncode == 2 and "checksum mismatch" in r.stderr
    assert "y [" not in r.stdout  # the application never started


@pytest.mark.parametrize("options", [[], ["-X", "dev"]])
def test_a_module_python_would_not_find_is_an_error_not_a_traceback(
        spec: Path, tmp_path: Path, options: list[str]) -> None:
    r = kf("run", "--deploy", str(spec), "--", "python", *options, "-m", "kf_no_such_app",
           cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "deploy report" not in r.stderr
    assert "error: python -m kf_no_such_app: no module named 'kf_no_such_app'" in r.stderr


def test_with_interpreter_options_a_spec_and_report_named_like_options(spec: Path,
                                                                      tmp_path: Path) -> None:
    # the new interpreter's kernforge run reads the same values: -s.json is no option there
    shutil.copy(spec, tmp_path / "-s.json")
    r = kf("run", "--deploy=-s.json", "--report=-r.json", "-q", "--", "python", "-X", "dev",
           str(spec.parent / "app.py"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "dev True" in r.stdout and "1 launch(es) ran a tuned variant" in r.stderr
    assert json.loads((tmp_path / "-r.json").read_text())["deployed"] is True


def test_the_report_goes_where_it_was_asked_for_when_the_application_changes_directory(
        spec: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    app = _app(spec, "chdir_app.py", f"import os\nos.chdir({str(tmp_path / 'elsewhere')!r})\n")
    r = kf("run", "--deploy", str(spec), "--report", "report.json", "-q", "--", "python",
           str(app), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "report.json").is_file()
    assert not (tmp_path / "elsewhere" / "report.json").exists()
