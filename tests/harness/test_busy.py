"""The busy check during a measurement leaves out this process's own work."""

from __future__ import annotations

import subprocess
import sys

from kernforge.harness import busy


def test_a_child_it_waited_for_counts_as_its_own_work() -> None:
    """A compile inside the window (a child the process waits for) is not another process's
    load: before, its CPU time counted as others', and a measurement that compiled a variant
    read as 'busy' on an idle machine."""
    before = busy._own_cpu()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert busy._own_cpu() - before >= 0.25
