"""``kernforge run --deploy NATIVE_SPEC`` of a spec verified before starts the program without
the command line parser, hashing or writing (cli/native_launch.quick, deploy/linecache.py), with
the same counts, exit status and signals; an edited spec or image is verified again and refused
as on a first start. Real CLI, real interposer, the fake CUDA driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.cli.native_launch import quick
from kernforge.deploy import linecache
from kernforge.deploy import native as nd
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

# what the quick start of a verified spec does without: the parser, the other commands, the
# spec's model and hashes, the interposer's build, and the modules they pull in
NOT_NEEDED = ("argparse", "hashlib", "json", "subprocess", "typing", "re", "enum", "pathlib",
              "tempfile", "shutil", "kernforge.cli.run_cmd", "kernforge.deploy.native",
              "kernforge.deploy.specdoc", "kernforge.deploy.interposed",
              "kernforge.record.interposer", "kernforge.core.errors",
              "kernforge.core.jsonio", "kernforge.pipeline.run_app")
AFTER = """import sys
from kernforge.cli.main import main
status = main(sys.argv[1:])
seen = sorted(sys.modules)
import json
print("MODULES " + json.dumps(seen))
sys.exit(status)
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, seed_cache: Callable[[Path], Path]) -> Path:
    return seed_cache(tmp_path_factory.mktemp("cache"))  # holds the run's interposer


@pytest.fixture
def spec(on_fake: FakeCuda, tmp_path: Path, cache: Path,
         monkeypatch: pytest.MonkeyPatch) -> Path:
    """A native spec, started once (so verified and kept): files older than RACY_NS (0 here:
    the fixture's files were written before the verification started)."""
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(cache))
    monkeypatch.setattr(linecache, "RACY_NS", 0)
    status, units, _, _ = record_command(on_fake.command(), tmp_path / "rec", max_instances=1,
                                         kernels="heat")
    assert status == 0 and len(units) == 1
    image = on_fake.image(tuned=True)
    e = nd.entry(read_native(units[0]), {"block": [64, 1, 1], "carveout": 0}, "tuned.bin",
                 image, {"speedup": 1.5, "ci": [1.4, 1.6]})
    path = nd.write_spec(tmp_path / "spec.json", [e], {"tuned.bin": image})
    assert quick(["--deploy", str(path), "--", *on_fake.command()]) is None  # not yet
    assert main(["run", "--deploy", str(path), "--", *on_fake.command()]) == 0
    return path


def test_a_second_start_is_quick_and_lean(on_fake: FakeCuda, spec: Path, cache: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNFORGE_")}
    env["KERNFORGE_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-c", AFTER, "run", "--deploy", str(spec), "--",
                           *on_fake.command()], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "10 launch(es) ran a tuned configuration" in proc.stderr
    assert "heat: 10 replaced" in proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES "))
    seen = set(json.loads(line[len("MODULES "):]))
    assert "kernforge.cli.native_launch" in seen and "kernforge.deploy.preload_run" in seen
    assert sorted(seen & set(NOT_NEEDED)) == []


@pytest.mark.parametrize("words", [
    ["--deploy", "{spec}", "--"], ["--deploy={spec}", "-q", "--"], ["-q", "--deploy", "{spec}",
                                                                    "--quiet", "--"]])
def test_the_quick_forms(spec: Path, words: list[str]) -> None:
    assert quick([w.format(spec=spec) for w in words] + ["./app"]) is not None


@pytest.mark.parametrize("words", [
    ["--deploy", "{spec}", "./app"],  # no --: the parser reads it
    ["--deploy", "{spec}", "--report", "r.json", "--", "./app"],
    ["--deploy", "{spec}", "--print-env"], ["--deploy", "{spec}", "--"],
    ["--dep", "{spec}", "--", "./app"], ["--deploy", "-x", "--", "./app"],
    ["--deploy", "{spec}x", "--", "./app"]])
def test_anything_else_goes_to_the_parser(spec: Path, words: list[str]) -> None:
    assert quick([w.format(spec=spec) for w in words]) is None


def _edit(path: Path) -> None:
    """One byte changed, the size and the modification time kept."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_edited_spec_is_verified_again_and_refused(
        on_fake: FakeCuda, spec: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    st = spec.stat()
    text = spec.read_text()
    assert '"speedup": 1.5' in text
    spec.write_text(text.replace('"speedup": 1.5', '"speedup": 9.5'))  # the evidence, edited
    os.utime(spec, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as they were
    assert quick(["--deploy", str(spec), "--", *on_fake.command()]) is None
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 2
    err = capfd.readouterr().err
    assert "signature does not match" in " ".join(err.split())
    assert "launch(es) ran" not in err  # the program did not start


def test_an_image_altered_in_place_is_verified_again_and_refused(
        on_fake: FakeCuda, spec: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    _edit(spec.parent / "spec.images" / "tuned.bin")
    assert quick(["--deploy", str(spec), "--", *on_fake.command()]) is None
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 2
    err = " ".join(capfd.readouterr().err.split())
    assert "is missing or altered" in err and "launch(es) ran" not in err


@pytest.mark.parametrize("verified", [True, False])
def test_exit_status_signals_and_ignored_signals_are_the_programs(
        spec: Path, verified: bool, capfd: pytest.CaptureFixture[str]) -> None:
    if not verified:  # the same spec verified in full: both paths start the program alike
        Path(linecache.record_path(str(spec))).unlink()
    capfd.readouterr()
    named = f"{spec.parent}/./{spec.name}"  # the report names the spec as it was given
    assert main(["run", "--deploy", named, "--", "sh", "-c", "exit 3"]) == 3
    err = capfd.readouterr().err
    assert "no counts: the program exited with status 3" in err
    assert f"kernforge deploy report ({named}): 0 launch(es)" in err
    assert main(["run", "--deploy", str(spec), "--", "sh", "-c", "kill -TERM $$"]) == 143
    # Python ignores SIGPIPE and SIGXFSZ in itself; the program starts with them as a shell
    # would start it (default), and with what the launcher inherited otherwise
    assert main(["run", "--deploy", str(spec), "--", "sh", "-c",
                 "grep SigIgn /proc/$$/status"]) == 0
    ignored = int(capfd.readouterr().out.split()[-1], 16)
    assert not ignored & (1 << (13 - 1)) and not ignored & (1 << (25 - 1))


def test_a_missing_command_is_an_error_on_the_quick_path(
        spec: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert quick(["--deploy", str(spec), "--", "no-such-program-kf"]) is not None
    assert main(["run", "--deploy", str(spec), "--", "no-such-program-kf"]) == 2
    assert "command 'no-such-program-kf' not found" in capfd.readouterr().err


def test_the_record_names_what_made_the_line_file_and_the_library(spec: Path) -> None:
    """Another kernforge (its line writer, the JIT ids, the interposer's sources) is a miss."""
    from kernforge.backends import jit
    from kernforge.deploy import native_guards, native_unfused, specdoc
    from kernforge.record import interposer

    head = Path(linecache.record_path(str(spec))).read_bytes().split(linecache.SEPARATOR)[0]
    named = {row.split("\t")[1] for row in head.decode().splitlines()[1:]}
    native = Path(interposer.__file__).with_name("native")
    assert {nd.__file__, jit.__file__, interposer.__file__, str(native / "kf_deploy.c"),
            str(native / "kf_unfused.c"), native_unfused.__file__, native_guards.__file__,
            specdoc.__file__,
            str(spec.parent / "spec.images" / "tuned.bin"), str(native)} <= named


@pytest.mark.slow

def test_ctrl_c_of_the_launcher_alone_stops_the_program_and_exits_130(
        spec: Path, cache: Path) -> None:
    """SIGINT to the launcher alone (not its group): the program gets its grace time, then
    SIGINT; the launcher says it was interrupted and exits 130, leaving no program behind."""
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNFORGE_")}
    env["KERNFORGE_CACHE_DIR"] = str(cache)
    pid_file = spec.parent / "program.pid"
    assert quick(["--deploy", str(spec), "--", "sh"]) is not None  # the quick start's own
    proc = subprocess.Popen([sys.executable, "-m", "kernforge", "run", "--deploy", str(spec),
                             "--", "sh", "-c", f'echo $$ > {pid_file}; exec sleep 60'],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    program = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    with pytest.raises(ProcessLookupError):
        os.kill(program, 0)
