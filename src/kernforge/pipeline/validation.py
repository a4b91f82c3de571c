"""``kernforge integrity validate`` of one recorded unit, whatever recorded it: every gate on
the recorded kernel or a candidate, one verdict (:class:`~kernforge.replay.validate.Validation`)
whose exit status means the same for every unit.

A unit that holds a module image is validated by the driver backend at its recorded
addresses (:func:`kernforge.replay.native_validate.validate_native`: its candidate is its own
source, captured or bound, with ``--source``'s code); one that holds source only by its backend
through every integrity gate (:func:`kernforge.replay.validate.validate`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ConfigError, LaunchConfig, Recording, Tolerance, Unit
from ..core.textfile import read_text_file
from ..record import read_unit
from ..replay.checks import Integrity
from ..replay.native_validate import validate_native
from ..replay.unit_replay import DRIVER
from ..replay.validate import Validation, validate
from .tune_run import Isolating

# what a source build takes and a module image replayed at its recorded addresses does not:
# the field, and the option that sets it
_SOURCE_ONLY = {"options": "--opt", "defines": "--define", "threads": "--threads",
                "claimed": "--claimed", "baseline": "--baseline", "ledger": "--ledger",
                "figure": "--figure", "seed": "--seed"}


@dataclass(frozen=True)
class ValidateRequest:
    """What to validate and how: ``source`` the candidate's code (None: the recorded
    kernel), ``options``/``defines``/``threads`` its build and launch; the gates' settings
    (docs/integrity.md)."""

    source: Path | None = None
    tolerance: Tolerance | dict[str, Tolerance] | None = None
    passes: int = 7
    band: float = 0.02
    options: Mapping[str, Any] = field(default_factory=dict)
    defines: Mapping[str, str] = field(default_factory=dict)
    threads: int | None = None
    claimed: float | None = None
    baseline: str | None = None
    ledger: str | None = None
    figure: str | None = None
    seed: int | None = None
    static: bool = True
    require_idle: bool = False
    command: tuple[str, ...] = ()

    def given(self) -> list[str]:
        """The options given that only a source build takes."""
        return [flag for name, flag in _SOURCE_ONLY.items() if getattr(self, name)
                not in (None, {})]


def _code(path: Path) -> str:
    return read_text_file(path, hint="give the path of the candidate's source file")


def validate_unit(path: str | Path, req: ValidateRequest, *, isolation: Isolating,
                  check_code: Callable[[Unit, str], None] | None = None) -> Validation:
    """The verdict on one unit's candidate (``req``). ``check_code(unit, code)``: the
    caller's check of the candidate's source code before anything runs (its --define names,
    for one). An option the unit's backend cannot take is a ConfigError."""
    unit = read_unit(path)
    if unit.backend == DRIVER:
        if given := req.given():
            raise ConfigError(f"{given[0]} does not apply to a native unit",
                              hint="a native unit takes --source, --tolerance, --passes and "
                                   "--band")
        if isinstance(req.tolerance, dict):
            raise ConfigError("--tolerance BUF=SPEC: a native unit takes one SPEC for all "
                              "its memory (no BUF=)", hint="e.g. --tolerance rel:1e-6")
        return validate_native(unit.path, source=req.source, tolerance=req.tolerance,
                               passes=req.passes, band=req.band)
    if not isinstance(unit, Recording):
        raise ConfigError(f"{path}: no backend validates a unit of type "
                          f"{type(unit).__name__}", hint="record it with kernforge record")
    source = unit.source.with_code(_code(req.source)) if req.source else None
    if check_code is not None:
        check_code(unit, (source or unit.source).code)
    launch = (LaunchConfig(unit.launch.grid, unit.launch.block, unit.launch.shared_mem,
                           req.threads) if req.threads is not None else None)
    variant = unit.variant.with_(options=dict(req.options), defines=dict(req.defines),
                                 launch=launch, source=source)
    with isolation((unit.backend,)) as iso:
        return validate(unit, variant, tolerance=req.tolerance,
                        integrity=Integrity(static=req.static, seed=req.seed),
                        passes=req.passes, band=req.band, claimed=req.claimed,
                        baseline=req.baseline, ledger=req.ledger, figure=req.figure,
                        require_idle=req.require_idle, command=list(req.command), isolate=iso)
