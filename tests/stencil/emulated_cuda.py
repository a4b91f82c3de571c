"""A ``cuda`` backend on the host emulator (no GPU): generated stencil CUDA compiled by the host
C++ compiler behind the emulator's prelude (:mod:`kernforge.stencil.emulate`), launched on
numpy arrays, timed by the host clock. For tests of the paths a stencil operator takes as a
cuda variant (record, replay, validate, deploy); timings mean nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kernforge.backends.cuda import KNOBS
from kernforge.backends.null import NullBackend
from kernforge.backends.signature import parse_signature
from kernforge.core import KernelSource, LaunchConfig, Param, Variant
from kernforge.stencil import emulate


class EmulatedCuda(NullBackend):
    name = "cuda"
    language = "cuda"
    deploy_keys = ("device", "arch")

    def knobs(self):  # type: ignore[no-untyped-def]
        return KNOBS

    def identity(self) -> dict[str, Any]:
        return {"device": "host emulator", "arch": "sm_90 (emulated)"}

    def parse_signature(self, source: KernelSource,
                        defines: Mapping[str, str] | None = None) -> tuple[Param, ...]:
        return parse_signature(source, substitutions=defines)

    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        entry = variant.source.entry
        return (emulate.compile_source(variant.source.code, [entry]), entry), ""

    def _launch(self, handle: Any, args: Sequence[Any], launch: LaunchConfig) -> None:
        module, entry = handle
        module.launch(entry, [np.asarray(a) for a in args], launch.grid, launch.block,
                      launch.shared_mem)
