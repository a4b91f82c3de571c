"""The run database: a damaged ``app.db`` is a typed error (exit 2), not a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kernforge.apps.store import AppStore, AppStoreError
from kernforge.cli.main import main


@pytest.mark.parametrize("content", [b"", b"\x00garbage" * 20])
def test_a_damaged_database_is_a_typed_error(tmp_path: Path, content: bytes,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if content:
        (run / "app.db").write_bytes(content)
        with pytest.raises(AppStoreError, match="not a readable run database") as exc:
            AppStore.open(run)
        assert exc.value.exit_code == 2 and "another --out" in (exc.value.hint or "")
        assert main(["app", "report", str(run), "-o", str(tmp_path / "r.md")]) == 2
        assert "not a readable run database" in capsys.readouterr().err
    else:  # an empty file is an empty database: the report says so
        (run / "app.db").write_bytes(content)
        assert main(["app", "report", str(run), "-o", str(tmp_path / "r.md")]) == 2
        assert "the run database is empty" in capsys.readouterr().err


def test_a_database_of_another_program_is_a_typed_error(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "app.db")
    conn.execute("CREATE TABLE app (x INTEGER)")  # a table of that name, another schema
    conn.commit()
    conn.close()
    with pytest.raises(AppStoreError):
        AppStore.open(tmp_path).app()
