"""Child processes that end with kernforge: Linux's ``PR_SET_PDEATHSIG``, so that a child
does not outlive a kernforge killed by ``kill -9`` (and go on using the device while a resumed
run measures)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when this process dies (even by
    SIGKILL, when no cleanup of ours runs); None where prctl is not to be had. The signal is
    tied to the forking *thread*: call it from a thread that outlives the child."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # kernforge died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
