"""Atomic JSON writes: the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernforge.core.jsonio import canonical_checksum, canonical_json, write_json_atomic


def test_canonical_form_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1.5, "x"]}) == b'{"a":[1.5,"x"],"b":1}'
    assert canonical_checksum({"a": 1, "b": 2}) == canonical_checksum({"b": 2, "a": 1})


def test_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    p = tmp_path / "deep" / "r.json"
    write_json_atomic(p, {"v": 1})
    write_json_atomic(p, {"v": 2})
    assert json.loads(p.read_text()) == {"v": 2}
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]


def test_a_writer_killed_mid_loop_never_leaves_a_torn_file(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    code = ("import sys; from pathlib import Path; from kernforge.core.jsonio import "
            "write_json_atomic\nfor i in range(10**6): write_json_atomic(Path(sys.argv[1]), "
            "{'i': i, 'pad': 'x' * 200000})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)])
    deadline = time.time() + 20
    while not p.exists() and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    data = json.loads(p.read_text())  # complete: one of the versions written
    assert data["i"] >= 0 and len(data["pad"]) == 200000


def test_parse_json_says_where_a_damaged_document_broke() -> None:
    import pytest

    from kernforge.core.jsonio import DamagedJSON, parse_json

    assert parse_json('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(DamagedJSON, match=r"truncated or damaged.*line 2 column 7 \(char 12 of 12\)"):
        parse_json('{"a":\n [1, 2')


def test_parse_json_says_an_empty_file_is_empty_and_reads_as_english() -> None:
    import pytest

    from kernforge.core.jsonio import DamagedJSON, parse_json

    for empty in ("", " \n"):
        with pytest.raises(DamagedJSON, match=r"^not valid JSON: it is empty$"):
            parse_json(empty)
    with pytest.raises(DamagedJSON) as err:
        parse_json('{"format": "kernforge-deploy", "sch')
    assert "Unterminated string starting at line 1 column 32" in str(err.value)
    assert "at at" not in str(err.value)
