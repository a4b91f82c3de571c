"""scripts/stencil-device.sh, the wrapper of one GPU-machine call, run here with stand-ins for
``python3`` and ``nvidia-smi`` on the PATH that record their arguments (a forge stand-in writes
a table), so the argument passing, the time limits and the state between calls are checked
without a GPU: a mistake there costs a device call."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "stencil-device.sh"

FAKE_PYTHON = r"""#!/usr/bin/env bash
printf 'CALL'; for a in "$@"; do printf ' <%s>' "$a"; done; echo
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = "--out" ]; then j=$((i + 1)); mkdir -p "${!j}"; echo '{}' > "${!j}/matrix.json"; fi
done
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils timeout")


def _run(tmp_path: Path, name: str, **env: str) -> tuple[str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'FAKE GPU, 0'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    out = tmp_path / "out"
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out),
            "NAME": name, **env}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    log = (out / f"{name}-all.log").read_text()
    calls = [line for line in log.splitlines() if line.startswith("CALL")]
    return log, calls


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the script where it expects to be (the tree's scripts/), nothing carried."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / SCRIPT.name)
    return tmp_path


def test_one_call_runs_pytest_the_forge_its_bench_and_a_snapshot_with_their_words(
        tree: Path) -> None:
    name = f"t{os.getpid()}"
    try:
        log, calls = _run(tree, name, LIMIT="300", BENCH_RESERVE="100",
                          PYTEST='-m gpu tests/stencil -k "later and l2p"',
                          FORGE="--cell-ids a/8x8x8/fp32 --changes l2p --band 0.005",
                          BENCH_ARGS="--baselines ''", SNAP_CELLS="a/8x8x8/fp32,b/8x8x8/fp32")
        pytest_call, forge, bench, snap = calls
        assert "<-k> <later and l2p>" in pytest_call  # one word, as the shell quoted it
        assert f"<--out> </tmp/kf-forge-{name}> <--budget>" in forge
        assert "<--band> <0.005>" in forge
        assert int(forge.split("<--budget> <")[1].split(">")[0]) <= 200  # LIMIT - reserve
        assert f"<--table> </tmp/kf-forge-{name}/matrix.json> <--changed-from>" in bench
        assert bench.endswith("<--resume> <--baselines> <>")  # '' stays an empty argument
        assert "<--cell-ids> <a/8x8x8/fp32,b/8x8x8/fp32>" in snap and "<--baselines> <>" in snap
        for step in ("pytest", "forge", "bench", "snapshot"):
            assert f"{step} rc=0" in log
        assert (tree / "out" / f"{name}-matrix.json").exists()
        # a second forge of the same NAME on a warm machine starts afresh: no bench to resume
        Path(f"/tmp/kf-bench-{name}.json").write_text("{}")
        _run(tree, name, LIMIT="300", BENCH_RESERVE="100", FORGE="--changes l2p")
        assert not Path(f"/tmp/kf-bench-{name}.json").exists()
    finally:
        shutil.rmtree(f"/tmp/kf-forge-{name}", ignore_errors=True)
        for p in (f"/tmp/kf-bench-{name}.json", f"/tmp/kf-snap-{name}.json"):
            Path(p).unlink(missing_ok=True)


def test_steps_without_time_are_skipped_not_run_without_a_limit(tree: Path) -> None:
    name = f"u{os.getpid()}"
    try:
        log, calls = _run(tree, name, LIMIT="20", FORGE="--changes l2p",
                          SNAP_CELLS="a/8x8x8/fp32")
        assert calls == []  # timeout 0 would have meant no limit at all
        assert "forge skipped" in log and "snapshot skipped" in log
    finally:
        shutil.rmtree(f"/tmp/kf-forge-{name}", ignore_errors=True)
