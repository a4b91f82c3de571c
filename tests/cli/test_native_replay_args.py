"""``kernforge replay`` of native units: compare options it cannot use are bad input (exit 2,
one clear line), checked before any replay process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.testing.fakedriver import FakeCuda


@pytest.mark.parametrize("extra", [["--tolerance", "abs:1e-6", "--dtype", "float99"],
                                   ["--tolerance", "abs:1e-6", "--dtype", "object"],
                                   ["--tolerance", "v=rel:1e-6"]])
def test_a_bad_native_compare_option_is_bad_input(
        on_fake: FakeCuda, recorded: Path, extra: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown --dtype or a per-buffer --tolerance reached the replay process, which died
    with a traceback (exit 6, as if the variant had failed)."""
    assert main(["replay", str(recorded / "heat-0"), *extra]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
