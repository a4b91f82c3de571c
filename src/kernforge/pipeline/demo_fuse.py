"""The demo's fusion stage (CUDA example): the application's time loop run as fused launches.

After the demo's one-launch stages, the program is recorded again through the driver
interposer as a *sequence* unit (``--sequence T+2`` for the largest ``T`` tried: T+2 launches of
the stencil and, between them, each step's other launches: T+1 whole steps, which a step with
elided diagnostics needs, apps/fused_elided.py), and
:func:`kernforge.apps.operator_match.fuse_unit` tries to fuse ``T`` whole steps into one launch
(the stencil recognized, the step's boundary kernels folded, every candidate verified against the
recorded steps and fresh inputs, the best timed interleaved in replay and passed through the
gate every deployment passes). A fused spec that passed is deployed into the unchanged
program through the interposer and measured end to end with the demo's own harness
(:func:`kernforge.pipeline.demo_deploy.interleave`): the plain program, the demo's one-launch
deployment when it made one, and the fused deployment, each arm in a warm process of its own
(:mod:`.demo_child`: the interposer must be preloaded when a process starts), in interleaved
rounds. It is deployed only when the program's output check passes (:func:`output_check`),
the interposer fused launches, and the program is significantly faster with it than plain and
than with the one-launch deployment (:func:`decide`); otherwise the reason says why not.

The output check: the checksum line of a run with the fused spec against the plain run's. A
fused operator is verified in replay under the kernel's tolerance, not bit for bit (it applies
the recognized coefficients in its own order), so its field may differ from the plain one in
the last bits and its checksum (an exact hash of the field) then differs: the check passes
when the checksums are identical, or when every other figure of the line is the same and its
numbers agree within :data:`FIGURES_REL` relative.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..core import KernforgeError
from ..core.fmt import fmt_time
from ..deploy.interposed import deploy_env
from ..record import interposer
from .demo_child import AppProcess
from .demo_deploy import CHECKSUM, ROUNDS, EndToEnd, interleave, paired

SKIP = 2  # stencil launches left out before the sequence (the first runs after compilation)
#: how far a number of the checksum line may move with the fused spec, relative (a wrong
#: coefficient or boundary rule moves the field's mean by far more after a few steps)
FIGURES_REL = 1e-4
_FIGURE = re.compile(r"([A-Za-z_]\w*)=(\S+)")


class Fused(Protocol):  # apps.operator_match.FusedMatch's interface
    spec_path: Path
    speedup: float
    ci: tuple[float, float]
    steps: int
    note: str


@dataclass
class Fusion:
    """What the fusion stage did: ``deployed`` (the fused spec is the demo's deployment),
    ``reason`` (one line: why not, or what the deployment gives), the recorded ``unit``, the
    replay result ``match`` (None when nothing was fused), and the end-to-end comparisons of
    the fused deployment against the plain program and against the one-launch deployment."""

    deployed: bool
    reason: str
    unit: Path | None = None
    match: Fused | None = None
    vs_plain: EndToEnd | None = None
    vs_one_launch: EndToEnd | None = None
    check: str = ""  # what the output check found
    fused_groups: int = 0  # fused launches the interposer made in all runs of the fused arm
    runs: int = 0  # runs of the fused arm (warm-up included)

    @property
    def spec(self) -> Path | None:
        return self.match.spec_path if self.deployed and self.match is not None else None

    def to_json(self) -> dict[str, Any]:
        m = self.match

        def e2e(e: EndToEnd | None) -> dict[str, Any] | None:
            return None if e is None else {
                "speed": e.judgement.to_json(), "speedup": e.speedup, "speedup_ci": list(e.ci),
                "ratios": e.ratios, "baseline_s": e.plain_s, "fused_s": e.deployed_s,
                "outputs_identical": e.identical}
        return {"deployed": self.deployed, "reason": self.reason,
                "unit": None if self.unit is None else str(self.unit),
                "spec": None if m is None else str(m.spec_path),
                "steps": None if m is None else m.steps,
                "replay_speedup": None if m is None else m.speedup,
                "replay_ci": None if m is None else list(m.ci),
                "note": None if m is None else m.note,
                "output_check": self.check, "fused_groups": self.fused_groups, "runs": self.runs,
                "vs_plain": e2e(self.vs_plain), "vs_one_launch": e2e(self.vs_one_launch)}


def sequence_command(script: Path, n: int, sequence: int, extra: Sequence[str] = ()
                     ) -> list[str]:
    """The application with steps enough for :data:`SKIP` launches, then the sequence, then a
    margin (the sequence must end inside the loop, not at its last launch)."""
    return ["python", str(script), "--n", str(n), "--steps", str(SKIP + sequence + 4),
            *extra]


def record_sequence(command: Sequence[str], out: Path, kernel: str, sequence: int
                    ) -> Path | str:
    """The sequence unit of ``kernel``'s time loop recorded natively, or why there is none."""
    from .run_app import record_command

    try:
        status, units, problems, _ = record_command(command, out, kernels=kernel,
                                                    max_instances=1, skip=SKIP,
                                                    sequence=sequence)
    except KernforgeError as exc:
        return f"the sequence could not be recorded: {exc.message.strip().splitlines()[0]}"
    if status != 0:
        return f"the application exited with {status} while its time loop was recorded"
    if problems or not units:
        why = "; ".join(problems) or f"no launch of {kernel} was recorded"
        return f"no sequence unit was recorded ({why})"
    return units[0]


def fused_env(spec: Path, directory: Path) -> tuple[dict[str, str], Path]:
    """The environment that deploys the native ``spec`` into a program (the interposer
    preloaded in deploy mode, as ``kernforge run --deploy`` sets it), and where the
    interposer writes its counts when the program exits."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "deploy-log.json"
    lib, extra = deploy_env(spec, directory / "deploy.interposer.tsv", log)
    return interposer.preload_env(lib, extra), log


def measure_fused(command: Sequence[str], spec: Path, env: dict[str, str], log: Path, *,
                  one_launch: Path | None = None, rounds: int = ROUNDS,
                  progress: Callable[[str], None] = lambda s: None
                  ) -> tuple[EndToEnd, EndToEnd | None, dict[str, Any], int]:
    """The program plain, with the one-launch Python spec (when given) and with the fused
    deployment (``env``), each in a warm process, in interleaved rounds: the comparisons
    plain / fused and one-launch / fused, the interposer's counts and the fused arm's runs."""
    log.unlink(missing_ok=True)
    with AppProcess(command) as plain, AppProcess(command, env=env, log=log,
                                                  what="with the fused spec") as fused:
        arms = [plain, fused]
        one = None
        if one_launch is not None:
            one = AppProcess(command, spec=one_launch, what="with the one-launch spec")
            arms.append(one)
        try:
            runs = interleave(arms, rounds, label="end to end, fused", progress=progress)
        finally:
            if one is not None:
                one.close()
        counts = fused.close()
    vs_plain = paired(spec, [], runs[0], runs[1])
    vs_one = paired(spec, [], runs[2], runs[1]) if one_launch is not None else None
    return vs_plain, vs_one, counts, fused.runs


def output_check(plain: str, fused: str) -> tuple[bool, str]:
    """Whether the fused run's checksum line passes against the plain run's (see the module
    docstring), and what was found."""
    a, b = CHECKSUM.findall(plain), CHECKSUM.findall(fused)
    if not a or not b:
        return False, f"no checksum line in the {'plain' if not a else 'fused'} run's output"
    if a == b:
        return True, "checksums identical"
    la, lb = (next(ln for ln in out.splitlines() if CHECKSUM.search(ln))
              for out in (plain, fused))
    fa, fb = (dict(_FIGURE.findall(ln)) for ln in (la, lb))
    if fa.keys() != fb.keys():
        return False, "the checksum line has other figures with the fused spec"
    worst = 0.0
    for k in fa.keys() - {"checksum"}:
        if fa[k] == fb[k]:
            continue
        try:
            x, y = float(fa[k]), float(fb[k])
        except ValueError:
            x = y = math.nan
        if not (math.isfinite(x) and math.isfinite(y)) or _integral(fa[k]) \
                or _integral(fb[k]):  # a count or a word: the same, or the check fails
            return False, f"{k} is {fb[k]} with the fused spec, {fa[k]} plain"
        rel = abs(x - y) / max(abs(x), abs(y))
        if rel > FIGURES_REL:
            return False, (f"{k} is {fb[k]} with the fused spec, {fa[k]} plain ({rel:.1e} "
                           f"relative, above {FIGURES_REL:.0e})")
        worst = max(worst, rel)
    return True, (f"checksum differs (rounding), the line's other figures agree within "
                  f"{worst:.1e} relative")


def _integral(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text) is not None


def decide(vs_plain: EndToEnd, vs_one: EndToEnd | None, fused_groups: int
           ) -> tuple[bool, str]:
    """Whether the fused deployment is deployed, and why (not): the program's output check
    must pass (:func:`output_check`), the interposer must have fused launches, and the program
    must be significantly faster with it (:attr:`EndToEnd.judgement`) than plain and than with
    the one-launch deployment."""
    ok, found = output_check(vs_plain.plain_output, vs_plain.deployed_output)
    if not ok:
        return False, (f"the program's output check failed with the fused spec: {found}: "
                       f"not deployed")
    if fused_groups < 1:
        return False, ("the interposer fused no launch of the program (its launches did not "
                       "run as recorded): not deployed")
    speed = vs_plain.judgement
    if not speed.faster:
        return False, f"end to end against the plain program, {speed.reason}: not deployed"
    if vs_one is not None:
        speed = vs_one.judgement
        if not speed.faster:
            return False, (f"end to end against the one-launch deployment, {speed.reason}: "
                           f"the one-launch deployment stays")
    return True, "deployed"


def fusion_stage(record_command: Callable[[int], list[str]], run_command: Sequence[str],
                 out: Path, *, kernel: str, steps: tuple[int, ...] | None = None,
                 one_launch: Path | None = None, rounds: int = ROUNDS, repeat: int = 10,
                 passes: int = 7, progress: Callable[[str], None] = lambda s: None,
                 fuse: Callable[..., Any] | None = None) -> Fusion:
    """Record, fuse, measure and decide (see the module docstring): ``record_command(S)`` is
    the program run to record a sequence of S steps of ``kernel``'s loop
    (:func:`sequence_command`), ``run_command`` the program the end-to-end rounds run,
    ``steps`` the T tried (odd; default apps.fused.STEPS); ``fuse``: fuse_unit's stand-in."""
    from ..apps.fused import STEPS, check_steps

    steps = steps or STEPS
    for t in steps:
        check_steps(t)
    sequence = max(steps) + 2  # T+1 whole steps: T fused and the held one after them
    progress(f"recording the time loop natively ({sequence} steps of {kernel})")
    unit = record_sequence(record_command(sequence), out / "recording", kernel, sequence)
    if isinstance(unit, str):
        return Fusion(False, unit)
    if fuse is None:
        from ..apps.operator_match import fuse_unit

        fuse = fuse_unit
    progress(f"fusing {', '.join(map(str, steps))} steps of {unit.name} (each verified, "
             f"timed in replay)")
    m: Any = fuse(unit, out_dir=out / "fused", steps=steps, repeat=repeat, passes=passes)
    if not hasattr(m, "spec_path"):
        return Fusion(False, f"not fused: {m.reason}", unit)
    progress(f"running the program plain, fused{' and one-launch' if one_launch else ''}")
    try:
        env, log = fused_env(m.spec_path, out / "deploy")
        vs_plain, vs_one, counts, runs = measure_fused(run_command, m.spec_path, env, log,
                                                       one_launch=one_launch, rounds=rounds,
                                                       progress=progress)
    except KernforgeError as exc:
        why = exc.message.strip().splitlines()[0]
        return Fusion(False, f"the program failed with the fused spec ({why}): not deployed",
                      unit, m)
    groups = int(counts.get("fused_groups", 0))
    ok, why = decide(vs_plain, vs_one, groups)
    check = output_check(vs_plain.plain_output, vs_plain.deployed_output)[1]
    return Fusion(ok, why, unit, m, vs_plain, vs_one, check, groups, runs)


def describe(f: Fusion) -> str:
    """The stage in one line: what fusion did, or why nothing was fused or deployed."""
    m = f.match
    if m is None:
        return f"fusion: nothing fused: {f.reason}"
    head = (f"fused {m.steps} steps per launch: {m.speedup:.3f}x in replay [99% CI "
            f"{m.ci[0]:.3f}, {m.ci[1]:.3f}]")
    if f.vs_plain is None:
        return f"{head}; {f.reason}"
    e = f.vs_plain
    text = (f"{head}; end to end {e.speedup:.3f}x against plain [{e.ci[0]:.3f}, {e.ci[1]:.3f}]"
            f" (medians {fmt_time(e.plain_median_s)} plain, {fmt_time(e.deployed_median_s)} "
            f"fused)")
    if f.vs_one_launch is not None:
        o = f.vs_one_launch
        text += (f", {o.speedup:.3f}x against the one-launch deployment [{o.ci[0]:.3f}, "
                 f"{o.ci[1]:.3f}]")
    per = f.fused_groups // f.runs if f.runs else 0
    text += f"; {per} fused launches a run; {f.check}"
    return f"{text}; {'deployed ' + str(m.spec_path) if f.deployed else f.reason}"
