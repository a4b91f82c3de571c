"""Regression tests: the end-of-run validation has no weaker fallback, and the code-only result
cache is not part of the package."""

from __future__ import annotations

import subprocess
import sys

from kernforge.pipeline import evolve_eval, evolve_final
from kernforge.replay.validate import validate

from .evolve_helpers import ROOT


def test_finalize_uses_validate_and_an_import_failure_raises() -> None:
    assert evolve_final.validate is validate
    assert not hasattr(evolve_final, "compare")  # no plain-compare fallback left
    code = ("import sys\nsys.modules['kernforge.replay.validate'] = None\n"
            "try:\n    import kernforge.pipeline.evolve_final\n"
            "except ImportError:\n    print('raised')\nelse:\n    print('imported')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, check=False)
    assert r.stdout.strip() == "raised", r.stdout + r.stderr


def test_code_keyed_memo_is_not_in_the_package() -> None:
    assert not hasattr(evolve_eval, "memoized")
