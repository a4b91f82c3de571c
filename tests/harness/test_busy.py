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


def test_a_window_too_short_for_proc_stat_is_unknown_not_idle_or_busy() -> None:
    """A 5 ms interleaved re-measurement of a small kernel spans a tick or two of /proc/stat:
    one tick of another process read as 50 % busy (a spurious inconclusive), none as idle
    (evidence there was none of). Such a window is unknown, and the check before stands."""
    import time
    from types import SimpleNamespace
    from typing import Any, cast

    from kernforge.harness.provenance import IdleCheck

    cpu = cast(Any, SimpleNamespace(name="cpu"))
    short = busy.watch(cpu).result()
    assert short.idle is None and "too short" in short.note
    before = IdleCheck(True, 0.05, "/proc/stat over 0.2 s")
    assert busy.combine(before, short) is before
    w = busy.watch(cpu)
    time.sleep(busy.MIN_WINDOW_S * 1.5)
    assert w.result().idle is not None
