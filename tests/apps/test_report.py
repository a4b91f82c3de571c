"""``kernforge app report``: the summary table beside ForgeStencil's, per-application sections
and the chart, from real runs of the fake-driver program."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fake_program, skip_if_busy, write_manifest


def _app(tmp_path: Path, fake: FakeCuda, name: str, edit: tuple[str, str] = ("", "")) -> Path:
    # "fast" cuts a 0.25 s sleep to a quarter: clear enough for "faster" on a shared machine
    src = fake_program(tmp_path / name / "src", sleep=0.25 if name == "fast" else 0.05)
    m = write_manifest(tmp_path / name / "app.toml", src, fake)
    text = m.read_text().replace('"operator", "tune", "agent"', '"agent"')
    m.write_text(text.replace('name = "heat-fake"', f'name = "{name}"').replace(*edit))
    out = tmp_path / name / "run"
    status = main(["app", "run", str(m), "--out", str(out)])
    skip_if_busy(out)
    assert status == 0
    return out


@pytest.mark.slow
def test_report_of_several_applications(tmp_path: Path, fake: FakeCuda,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_app(tmp_path, fake, "fast"),
            _app(tmp_path, fake, "tiny", ("min_share = 0.0", "min_share = 0.9")),
            _app(tmp_path, fake, "broken", ("cc -O1 -o fake_app", "cc -O1 -o fake_app nope.c"))]
    report = tmp_path / "out" / "apps.md"
    assert main(["app", "report", *map(str, runs), "-o", str(report)]) == 0
    md = report.read_text()
    assert "| INTEGRATED | 1 |" in md and "| OUT_OF_SCOPE | 1 |" in md
    assert "| BLOCKED | 1 |" in md and "| applications | 3 | 100 |" in md
    assert "| 1.41x |" in md  # ForgeStencil's median beside kernforge's
    assert "## fast: INTEGRATED" in md and "| small |" in md and "geometric mean" in md
    assert "## broken: BLOCKED" in md and "the build failed" in md
    png = report.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png.name})" in md
    assert main(["app", "report", str(tmp_path), "-o", str(report)]) == 2  # not a run
    assert "holds no application run" in capsys.readouterr().err
