"""Memory for backends whose "device" memory is host memory (cpu, null)."""

from __future__ import annotations

from typing import Any

import numpy as np


class HostMemory:
    """to_device / restore / to_host for numpy buffers; mixed into host backends."""

    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def restore(self, buffer: np.ndarray, array: Any) -> None:
        np.copyto(buffer, array)

    def to_host(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)
