"""Deployment spec format v1: round trip, what entries hold, and the reader's refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from deploy_helpers import axpy_entry, record_axpy

from kernforge.deploy import DeploySpecError, read_spec, write_spec
from kernforge.deploy.spec import FORMAT, SCHEMA_VERSION


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    rec = record_axpy(tmp_path / "rec")
    return write_spec(tmp_path / "out" / "deploy.json", [axpy_entry(rec)])


def test_round_trip(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    entry = axpy_entry(rec, defines={"BIAS": 7}, constants={"n": 4, "a": 2.0})
    path = write_spec(tmp_path / "deploy.json", [entry, replace(entry, device={"device": "x"})])
    spec = read_spec(path)
    assert spec.entries == (entry, replace(entry, device={"device": "x"}))
    assert spec.path == path and spec.kernforge_version and spec.created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy.json", "rec"]  # no temp file


def test_entry_content(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    doc = json.loads(write_spec(tmp_path / "d.json", [axpy_entry(rec)]).read_text())
    assert doc["format"] == FORMAT and doc["schema_version"] == SCHEMA_VERSION
    e = doc["entries"][0]
    assert e["kernel"]["backend"] == "null" and e["kernel"]["entry"] == "axpy"
    assert e["kernel"]["name_expression"] is None and e["kernel"]["defines"] == {"BIAS": "0"}
    assert e["device"] == {"device": "host (null backend)"}
    args = {a["name"]: a for a in e["problem"]["args"]}
    assert args["x"] == {"name": "x", "kind": "array", "dtype": "float64", "shape": [4],
                         "value": None}
    assert args["n"]["value"] == 4  # integers are part of the problem
    assert args["a"]["value"] is None  # floats only when compiled in as constants
    assert e["variant"]["code"] is None and e["variant"]["defines"] == {"BIAS": "100"}
    assert e["evidence"]["speedup"] == 2.0 and e["evidence"]["speedup_ci"] == [1.9, 2.1]
    assert e["evidence"]["recording"] == str(rec.path.resolve())
    assert e["evidence"]["identity"]["compiler"] == "python exec"


def test_constants_and_code_are_kept(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    code = rec.source.code.replace("+ BIAS", "+ BIAS + 0.0")
    entry = axpy_entry(rec, constants={"a": 2.0}, source=rec.source.with_code(code))
    assert entry.variant.code == code and entry.variant.constants == {"a": 2.0}
    assert {a.name: a.value for a in entry.problem.args}["a"] == 2.0


def test_edited_spec_is_refused(spec_path: Path) -> None:
    spec_path.write_text(spec_path.read_text().replace('"BIAS": "100"', '"BIAS": "101"'))
    with pytest.raises(DeploySpecError, match="checksum mismatch") as exc:
        read_spec(spec_path)
    assert str(spec_path) in exc.value.message and "export" in (exc.value.hint or "")


def test_truncated_spec_is_refused(spec_path: Path) -> None:
    text = spec_path.read_text()
    spec_path.write_text(text[: len(text) // 2])
    with pytest.raises(DeploySpecError, match="truncated") as exc:
        read_spec(spec_path)
    assert str(spec_path) in str(exc.value)


def _rewrite(path: Path, **changes: object) -> None:
    from kernforge.core.jsonio import canonical_checksum

    doc = json.loads(path.read_text())
    doc.update(changes)
    doc.pop("checksum")
    doc["checksum"] = canonical_checksum(doc)
    path.write_text(json.dumps(doc))


def test_unknown_version_is_refused(spec_path: Path) -> None:
    _rewrite(spec_path, schema_version=2)
    with pytest.raises(DeploySpecError, match="unknown schema_version 2") as exc:
        read_spec(spec_path)
    assert "upgrade kernforge" in (exc.value.hint or "")


def test_other_files_are_refused(tmp_path: Path, spec_path: Path) -> None:
    with pytest.raises(DeploySpecError, match="no such deployment spec"):
        read_spec(tmp_path / "missing.json")
    with pytest.raises(DeploySpecError, match="is a directory, not a deployment spec"):
        read_spec(tmp_path)
    with pytest.raises(DeploySpecError, match="/dev/null: is not a regular file"):
        read_spec(Path("/dev/null"))  # there, but no file: not "no such deployment spec"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "kernforge-recording"}))
    with pytest.raises(DeploySpecError, match="not a kernforge deployment spec"):
        read_spec(other)
    _rewrite(spec_path, entries=[{"kernel": {}}])
    with pytest.raises(DeploySpecError, match="lacks required key"):
        read_spec(spec_path)


def test_malformed_entry_is_refused(spec_path: Path) -> None:
    doc = json.loads(spec_path.read_text())
    doc["entries"][0]["problem"]["args"][0]["kind"] = "pointer"
    _rewrite(spec_path, entries=doc["entries"])
    with pytest.raises(DeploySpecError, match=r"entries\[0\] is malformed"):
        read_spec(spec_path)


def test_entry_needs_positive_times(tmp_path: Path) -> None:
    from kernforge.core import ConfigError
    from kernforge.deploy import entry_from_recording

    rec = record_axpy(tmp_path / "rec")
    with pytest.raises(ConfigError, match="tuned_s"):
        entry_from_recording(rec, rec.variant, baseline_s=1.0, tuned_s=float("inf"),
                             speedup=1.0, speedup_ci=None)
