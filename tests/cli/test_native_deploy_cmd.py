"""``kernforge run --deploy SPEC -- COMMAND`` (native spec): the program's exit status is kept,
and the counts say what happened, also when a shell started the program."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.deploy import native as nd
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture
def spec(on_fake: FakeCuda, tmp_path: Path) -> Path:
    fake = on_fake
    status, units, _, _ = record_command(fake.command(), tmp_path / "rec", max_instances=1,
                                         kernels="heat")
    assert status == 0 and len(units) == 1
    image = fake.image(tuned=True)
    e = nd.entry(read_native(units[0]), {"block": [64, 1, 1], "carveout": 0}, "tuned.bin",
                 image, {"speedup": 1.5, "ci": [1.4, 1.6]})
    return nd.write_spec(tmp_path / "spec.json", [e], {"tuned.bin": image})


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_normal_non_zero_exit_is_named_and_kept(
        spec: Path, shell: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--deploy", str(spec), "--", shell, "-c", "exit 3"]) == 3
    err = capfd.readouterr().err
    assert "did not exit normally" not in err
    assert "no counts: the program exited with status 3" in err
    assert "none used the CUDA driver" in err


def test_a_shell_exiting_after_the_program_keeps_its_counts(
        fake: FakeCuda, spec: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # bash leaves through exit() after the program: its own (empty) counts used to
    # overwrite the program's, reporting 0 replaced
    script = " ".join(fake.command()) + " >/dev/null; exit 3"
    assert main(["run", "--deploy", str(spec), "--", "bash", "-c", script]) == 3
    err = capfd.readouterr().err
    assert "10 launch(es) ran a tuned configuration" in err and "heat: 10 replaced" in err


def test_a_python_program_importing_kernforge_under_a_native_spec_is_not_warned(
        spec: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # $KERNFORGE_DEPLOY names the interposer's line file: import kernforge read it as a
    # Python spec and warned "not deployed: ... not valid JSON ... export the spec again"
    code = "import kernforge, sys; print('imported', file=sys.stderr)"
    assert main(["run", "--deploy", str(spec), "--", sys.executable, "-c", code]) == 0
    err = capfd.readouterr().err
    assert "imported" in err and "not deployed" not in err and "Warning" not in err
