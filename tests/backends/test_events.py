"""notify_launch: the order in which observers see a launch."""

from __future__ import annotations

import numpy as np

from kernforge.backends import Kernel, add_observer, remove_observer
from kernforge.backends.null import NullBackend

SRC = '''
def inc(x: "double *", n: "int") -> None:
    x[:n] += 1.0
'''


class Syncing(NullBackend):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def synchronize(self) -> None:
        self.log.append("synchronize")


class Ordered:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def before(self, event):
        self.log.append("before")
        return "tok"

    def launched(self, token):
        self.log.append(f"launched:{token}")

    def after(self, token, error):
        self.log.append(f"after:{token}:{error is None}")


def test_launched_runs_between_launch_and_synchronize() -> None:
    log: list[str] = []
    k = Kernel(SRC, "inc", backend=Syncing(log))
    obs = Ordered(log)
    add_observer(obs)
    try:
        k(np.zeros(3), 3)
    finally:
        remove_observer(obs)
    assert log == ["before", "launched:tok", "synchronize", "after:tok:True"]
