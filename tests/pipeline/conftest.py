from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.pipeline.run_app import record_application

from .evolve_helpers import APP, APP_ARGS


@pytest.fixture(scope="session")
def heat_recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evolve-rec") / "rec"
    status, _ = record_application(["python", str(APP), *APP_ARGS], out, kernels="heat_step",
                                   max_instances=2)
    assert status == 0
    return out
