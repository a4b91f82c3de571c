"""``$KERNFORGE_DEPLOY`` at start-up (deploy/startup.py): the spec is checked at ``import
kernforge``, nothing heavy is imported, and the deployment is made on the first launch of a
kernel the spec is for, with the same counts and checks as one made at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import axpy_entry, axpy_kernel, record_axpy

from kernforge import deploy
from kernforge.backends import Kernel, events
from kernforge.core.jsonio import canonical_checksum
from kernforge.deploy import startup
from kernforge.deploy.spec import read_spec
from kernforge.deploy.specdoc import entry_lookup

HERE = Path(__file__).resolve().parent
OTHER = '''
def scale(x: "double *", n: "int") -> None:
    x[:n] = 2 * x[:n]
'''
# what the deployment of a matching launch needs, and what no deployment needs at all
HEAVY = ("logging", "tempfile", "kernforge.deploy.runtime", "kernforge.deploy.decide",
         "kernforge.deploy.match", "kernforge.deploy.spec", "kernforge.deploy.entries",
         "kernforge.deploy.reverify", "kernforge.deploy.overhead", "kernforge.deploy.worth",
         "optuna", "matplotlib", "jsonschema", "cupy")

PROBE = f"""
import json, sys
import numpy as np
sys.path.insert(0, {str(HERE)!r})
import kernforge
from kernforge.backends import Kernel, events
heavy = {HEAVY!r}
out = {{"at_import": [m for m in heavy if m in sys.modules],
        "pending": type(events.substituter()).__name__}}
Kernel({OTHER!r}, "scale", backend="null")(np.ones(4), 4)   # not in the spec
out["after_other"] = [m for m in heavy if m in sys.modules]
if sys.argv[1] == "launch":
    from deploy_helpers import axpy_kernel
    y = np.ones(4)
    axpy_kernel()(np.arange(4.0), y, 2.0, 4)
    out["y"] = y.tolist()
    out["report"] = kernforge.deploy.report().to_json()
print("OUT", json.dumps(out))
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    rec = record_axpy(tmp_path / "rec")
    return deploy.write_spec(tmp_path / "deploy.json", [axpy_entry(rec)])


def probe(spec: Path, mode: str) -> dict[str, object]:
    env = {**os.environ, "KERNFORGE_DEPLOY": str(spec), "KERNFORGE_DEPLOY_VERIFY": "off"}
    r = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.split("OUT ", 1)[1])  # type: ignore[no-any-return]


def test_environment_deploy_imports_nothing_heavy_until_a_kernel_of_the_spec_launches(
        spec_file: Path) -> None:
    out = probe(spec_file, "none")
    assert out["pending"] == "Pending"
    assert out["at_import"] == [] and out["after_other"] == []  # a kernel not in the spec


def test_the_first_launch_of_a_spec_kernel_deploys_it_with_every_count(spec_file: Path
                                                                       ) -> None:
    out = probe(spec_file, "launch")
    report = out["report"]
    assert isinstance(report, dict)
    assert report["kernels"]["scale"] == {"replaced": 0, "verified": 0, "fallback": 1,
                                          "reasons": {"not in the spec": 1}}
    assert report["kernels"]["axpy"]["replaced"] == 1
    assert out["y"] == [101.0, 103.0, 105.0, 107.0]  # the tuned variant (BIAS=100) ran
    assert report["spec"] == str(spec_file)


def test_an_edited_spec_is_refused_at_start_up(spec_file: Path) -> None:
    doc = json.loads(spec_file.read_text())
    doc["entries"][0]["variant"]["defines"]["BIAS"] = 7
    spec_file.write_text(json.dumps(doc))
    env = {**os.environ, "KERNFORGE_DEPLOY": str(spec_file)}
    code = "import kernforge; from kernforge.backends import events; print(events.active())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    assert "not deployed" in r.stderr and "checksum mismatch" in r.stderr


def test_a_malformed_entry_is_refused_at_the_first_launch(
        spec_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(spec_file.read_text())
    del doc["entries"][0]["problem"]["launch"]
    doc.pop("checksum")
    doc["checksum"] = canonical_checksum(doc)  # signed, but not an entry this reader reads
    spec_file.write_text(json.dumps(doc))
    monkeypatch.setenv("KERNFORGE_DEPLOY", str(spec_file))
    pending = startup.activate()
    try:
        assert pending is not None and events.substituter() is pending
        y, kernel = np.ones(4), axpy_kernel()
        with pytest.warns(RuntimeWarning, match="entries\\[0\\] is malformed"):
            kernel(np.arange(4.0), y, 2.0, 4)
        np.testing.assert_array_equal(y, 2.0 * np.arange(4.0) + 1)  # the original ran
        assert events.substituter() is None
    finally:
        events.set_substituter(None)
        monkeypatch.setattr(startup, "_pending", None)


def test_the_api_sees_a_pending_deployment(spec_file: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNFORGE_DEPLOY", str(spec_file))
    pending = startup.activate()
    try:
        assert pending is not None and pending.deployment is None
        Kernel(OTHER, "scale", backend="null")(np.ones(4), 4)
        assert pending.deployment is None and pending.report().fallback == 1
        dep = deploy.current()  # made now, with the counts so far
        assert dep is not None and dep is pending.deployment
        assert dep.report().kernels["scale"].reasons == {"not in the spec": 1}
        assert dep.spec == read_spec(spec_file)
    finally:
        deploy.stop()
        monkeypatch.setattr(startup, "_pending", None)


def test_the_lookup_of_a_raw_entry_is_the_lookup_of_the_entry(spec_file: Path) -> None:
    doc = json.loads(spec_file.read_text())
    spec = read_spec(spec_file)
    assert [entry_lookup(e["kernel"]) for e in doc["entries"]] == \
        [e.kernel.lookup() for e in spec.entries]
