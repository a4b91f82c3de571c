"""M3b: tune (and, where the source is known, evolve) the recorded kernels themselves.

The existing commands do the work, each in a process of its own (a crash is that kernel's
failure, and their logs land in ``OUT/logs``): ``kernforge tune UNIT`` (native units:
geometry, carveout, JIT options; units with source: compile options and launch parameters),
``kernforge evolve UNIT --config FILE`` for every unit whose source is known (recorded with it,
or captured from NVRTC by the interposer): with the manifest's ``evolve_config`` (an LLM or
other proposers) when it names one, else offline rewrites (``evolve_iterations``, default 24;
0: tune only), then ``kernforge export`` with its gate (verified, significant). Kernels an
earlier strategy already replaced are not tuned. Each exported spec is one piece of the
integration that M4 deploys.
"""

from __future__ import annotations

import sys
from pathlib import Path
from textwrap import shorten
from typing import Any

from ...core import KernforgeError
from ...core.jsonio import parse_json
from ...deploy import native as nd
from ..process import Ran, head_text, run, write_log
from . import Context, Outcome, Strategy

TOOL_TIMEOUT_S = 4 * 3600.0


def kernforge(ctx: Context, args: list[str], log: str) -> Ran:
    """``python -m kernforge ARGS`` in the run directory, with the application's environment
    (its ``env``: e.g. the driver library the units replay on)."""
    env = ctx.harness.env(ctx.harness.original())
    ran = run([sys.executable, "-m", "kernforge", *args], cwd=ctx.out, env=env,
              timeout_s=TOOL_TIMEOUT_S)
    write_log(ctx.out / "logs" / f"m3b-{log}.log", ran)
    return ran


def _spec_figures(spec: Path) -> list[dict[str, Any]]:
    doc = parse_json(spec.read_text("utf-8"))
    out = []
    for e in doc.get("entries", []):
        ev = e.get("evidence") or {}
        if nd.is_native_spec(spec):
            out.append({"kernel": e["name"], "speedup": ev.get("speedup"), "ci": ev.get("ci"),
                        "variant": ev.get("variant")})
        else:
            out.append({"kernel": e["kernel"]["entry"], "speedup": ev.get("speedup"),
                        "ci": ev.get("speedup_ci")})
    return out


PATHS = ("tune", "evolve")


def refusals(export_stderr: str, base: Path) -> dict[str, str]:
    """Why ``kernforge export`` left out the result of each path (``tune``, ``evolve``) of
    the unit run in ``base``: its ``skipped RESULT: WHY`` lines (one per line, unwrapped),
    by the directory the result is in; the first reason of each path."""
    out: dict[str, str] = {}
    for line in export_stderr.splitlines():
        if not line.startswith("skipped "):
            continue
        path, _, why = line[len("skipped "):].partition(": ")
        for name in PATHS:
            try:
                Path(path).relative_to(base / name)
            except ValueError:
                continue
            out.setdefault(name, " ".join(why.split()))
    return out


def path_verdicts(info: dict[str, Any]) -> str:
    """One unit's line of M3b's reason: the kernel and its dataset, which path won with its
    speedup, and why each other path was refused (``info`` as :class:`TuneStrategy` fills
    it: ``ran``, ``refused``, ``exported``)."""
    head = f"{head_text(info['kernel'], 40)} ({info['dataset']})"
    if "tune_exit" in info and info["tune_exit"] != 0:
        return f"{head}: {shorten(info.get('reason', ''), 240, placeholder='...')}"
    ran: list[str] = info.get("ran", [])
    refused: dict[str, str] = info.get("refused", {})
    won = [p for p in ran if p not in refused]
    why = "; ".join(f"{p} refused: {shorten(refused[p], 160, placeholder='...')}"
                    for p in ran if p in refused)
    if info.get("exported"):
        x = [e["speedup"] for e in info["exported"] if e.get("speedup")]
        fig = f" {max(x):.2f}x" if x else ""
        by = " or ".join(won) if won else "?"
        return f"{head}:{fig} by {by}" + (f" ({why})" if why else "")
    if why:
        return f"{head}: nothing exported ({why})"
    return f"{head}: nothing exported ({shorten(info.get('reason', ''), 240, placeholder='...')})"


def has_source(unit: Path, kind: str | None) -> bool:
    """Whether the unit's kernel source is known: a unit recorded with its source, or a
    native unit whose recording captured it (NVRTC)."""
    if kind == "source":
        return True
    from ...record.native_format import read_native

    try:
        return read_native(unit).source is not None
    except (KernforgeError, OSError):  # unreadable: tuned (and failing) alone, not evolved
        return False


def evolve_config(integ: Any, unit: Path, k: dict[str, Any], base: Path) -> Path | None:
    """The evolve configuration of a unit with source: the manifest's, else offline rewrites
    (``evolve_iterations`` of them; 0 turns evolution off), written beside the unit's run."""
    if not has_source(unit, k.get("kind")):
        return None
    if integ.evolve_config is not None:
        return Path(integ.evolve_config)
    if integ.evolve_iterations <= 0:
        return None
    base.mkdir(parents=True, exist_ok=True)
    path = base / "evolve-offline.toml"
    path.write_text("# written by kernforge app (M3b): offline rewrites, no LLM\n"
                    f"[evolve]\nmax_iterations = {integ.evolve_iterations}\n"
                    "eval_slots = 1\n\n[[proposers]]\nkind = \"offline\"\nweight = 1\n")
    return path


def _replaced(ctx: Context) -> set[str]:
    """Units an earlier strategy already replaced."""
    return {k["unit"] for o in ctx.earlier.values() for k in o.figures.get("kernels", [])
            if k.get("matched")}


class TuneStrategy(Strategy):
    milestone = "M3b"
    title = "tune and evolve the recorded kernels"

    def apply(self, ctx: Context) -> Outcome:
        integ = ctx.manifest.integrate
        skip = _replaced(ctx)
        todo = [(k, u) for k, u in ctx.units() if str(u) not in skip]
        if not todo:
            return Outcome("SKIPPED", "no recorded kernel left to tune"
                           + (" (the others were replaced by operators)" if skip else ""))
        native: list[str] = []
        source: list[str] = []
        kernels: list[dict[str, Any]] = []
        for i, (k, unit) in enumerate(todo):
            tag = f"{i}-{unit.parent.name}-{unit.name}"[:80]
            base = self.workdir(ctx.out) / tag
            ctx.progress(f"{ctx.manifest.name}: tuning {k['name'][:60]} ({unit.parent.name}/"
                         f"{unit.name})")
            # a native unit's candidates (one change at a time) are few: all of them evaluated
            trials = ["--trials", str(integ.tune_trials)] if k.get("kind") == "source" else []
            ran = kernforge(ctx, ["tune", str(unit), "--out", str(base / "tune"), *trials,
                                  "--preset", integ.tune_preset], f"{tag}-tune")
            info: dict[str, Any] = {"kernel": k["name"], "unit": str(unit),
                                    "dataset": unit.parent.name, "share": k.get("share"),
                                    "tune_exit": ran.returncode, "ran": ["tune"]}
            if ran.returncode != 0:
                info["reason"] = f"kernforge tune {ran.ended}: " + " ".join(ran.tail(300).split())
                kernels.append(info)
                continue
            run_dir = base / "tune"
            config = evolve_config(integ, unit, k, base)
            if config is not None:
                ctx.progress(f"{ctx.manifest.name}: evolving {k['name'][:60]}")
                ev = kernforge(ctx, ["evolve", str(unit), "--config", str(config),
                                     "--out", str(base / "evolve")], f"{tag}-evolve")
                info["evolve_exit"] = ev.returncode
                info["evolved_by"] = ("the manifest's evolve_config"
                                      if integ.evolve_config is not None else
                                      f"offline rewrites ({integ.evolve_iterations} iterations)")
                info["ran"].append("evolve")
                run_dir = base  # export takes the faster of tune and evolve per problem
            else:
                info["evolved_by"] = None
            spec = base / "deploy.json"
            ex = kernforge(ctx, ["export", str(run_dir), "-o", str(spec)], f"{tag}-export")
            info["refused"] = refusals(ex.stderr, base)
            if ex.returncode != 0 or not spec.is_file():
                info["reason"] = "no significant, verified win: " + " ".join(ex.tail(300).split())
                kernels.append(info)
                continue
            info["exported"] = _spec_figures(spec)
            info["spec"] = str(spec)
            (native if nd.is_native_spec(spec) else source).append(str(spec))
            kernels.append(info)
        figures = {"kernels": kernels}
        per_unit = "; ".join(path_verdicts(x) for x in kernels)
        if not native and not source:
            return Outcome("FAILED", f"no tuned kernel passed the gate ({per_unit})", figures)
        return Outcome("DONE", f"tuned and exported: {per_unit}", figures,
                       native_specs=tuple(native), source_specs=tuple(source))
