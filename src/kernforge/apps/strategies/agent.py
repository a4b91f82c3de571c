"""M3c: the agent step. Any agent CLI (as the evolve command proposer drives one: the prompt on
stdin) edits a COPY of the program's source, in place, in its working directory; kernforge
then builds the copy and runs every dataset from it under the same harness (the program's own
check must pass). The original stays byte-identical: its files are hashed before and after,
and a change there fails the step. The switch is the directory the program runs from: the
original runs unchanged.

Tried only when no earlier strategy produced an integration (operator matching and tuning
apply to the kernels without touching the source; the agent step is for what they cannot do).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ..harness import RunFailed, Setup
from ..manifest import expand
from ..process import head_text, run, write_log
from ..tree import changed, load_original, snapshot
from . import Context, Outcome, Strategy

PROMPT = """You are improving the performance of an application without changing its results.
The current directory is a copy of the application's source: edit files here, in place.
Do not touch anything outside this directory.

Application: {name}
Build (run here): {build}
Datasets (run here, each must still pass the program's own check):
{datasets}
Check: {check}
Time is measured as: {timer}

Where the time goes (recorded on dataset {rec}, {run_s:.4g} s a run):
{kernels}

Make the program faster on every dataset. Keep its output and its own check identical.
When you are done, exit 0.
"""


def _prompt(ctx: Context) -> str:
    m = ctx.manifest
    ks = "\n".join(f"- {head_text(k['name'], 100)}: {k['seen']} launches, "
                   + (f"{100 * k['share']:.1f} % of the run" if k.get("share") is not None
                      else "time unknown") for k in ctx.kernels[:12]) or "- (no kernel seen)"
    check = m.check.kind + (f" pattern {m.check.pattern!r}" if m.check.pattern else "") + (
        f" files {list(m.check.files)}" if m.check.files else "") + (
        f", tolerance abs {m.check.abs:g} rel {m.check.rel:g}" if m.check.kind != "exit" else "")
    timer = "wall clock" if m.timer.kind == "wall" else f"printed time {m.timer.pattern!r}"
    return PROMPT.format(name=m.name, build=m.build, check=check, timer=timer,
                         datasets="\n".join(f"- {d.name}: {d.run}" for d in m.datasets),
                         rec=m.record_dataset, run_s=ctx.run_s, kernels=ks)


class AgentStrategy(Strategy):
    milestone = "M3c"
    title = "agent edits a copy of the source"

    def apply(self, ctx: Context) -> Outcome:
        if not ctx.agent:
            return Outcome("SKIPPED", "no agent command (give [integrate] agent in the "
                                      "manifest or --agent)")
        if any(o.integrates for o in ctx.earlier.values()):
            return Outcome("SKIPPED", "an earlier strategy already integrated a change")
        m, h = ctx.manifest, ctx.harness
        copy = self.workdir(ctx.out) / "source"
        if copy.exists():
            shutil.rmtree(copy)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(m.source, copy, symlinks=True)
        before = snapshot(copy)
        original = load_original(ctx.out)
        ctx.progress(f"{m.name}: the agent edits a copy of the source ({copy})")
        env = h.env(Setup("agent", copy))
        env["KERNFORGE_APP_SOURCE"] = str(copy)
        ran = run(expand(ctx.agent, copy), cwd=copy, env=env,
                  timeout_s=m.integrate.agent_timeout_s, stdin=_prompt(ctx))
        write_log(ctx.out / "logs" / "m3c-agent.log", ran)
        figures: dict[str, Any] = {"agent": ctx.agent, "exit": ran.returncode,
                                   "seconds": ran.seconds, "copy": str(copy)}
        touched = changed(m.source, original)
        figures["original_unchanged"] = not touched
        if touched:
            return Outcome("FAILED", f"the original source changed during the agent step: "
                                     f"{touched[:5]}: nothing of it is used", figures)
        after = snapshot(copy)
        edits = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        figures["changed_files"] = edits
        if ran.returncode != 0:
            return Outcome("FAILED", f"the agent {ran.ended}: {ran.tail(300)}",
                           figures)
        if not edits:
            return Outcome("FAILED", "the agent changed no file", figures)
        ctx.progress(f"{m.name}: building the agent's version")
        b = h.build(copy)
        if b.returncode != 0:
            return Outcome("FAILED", f"the agent's version does not build "
                                     f"({b.ended}): {b.tail(300)}", figures)
        setup = Setup("agent", copy)
        try:
            times = {d.name: h.timed(d, setup) for d in m.datasets}
        except RunFailed as exc:
            return Outcome("FAILED", f"the agent's version fails: {exc}", figures)
        figures["screen_s"] = times
        _diff(m.source, copy, edits, self.workdir(ctx.out) / "changes.diff")
        return Outcome("DONE", f"the agent changed {len(edits)} file(s) "
                               f"({', '.join(edits[:4])}); it builds and passes its check on "
                               f"every dataset", figures, source=str(copy))


def _diff(original: Path, copy: Path, files: list[str], out: Path) -> None:
    """A unified diff of the agent's text changes, for the person reviewing them."""
    import difflib
    parts = []
    for rel in files:
        a, b = original / rel, copy / rel
        try:
            ta = a.read_text("utf-8").splitlines(True) if a.is_file() else []
            tb = b.read_text("utf-8").splitlines(True) if b.is_file() else []
        except UnicodeDecodeError:
            parts.append(f"Binary file {rel} differs\n")
            continue
        parts.extend(difflib.unified_diff(ta, tb, f"a/{rel}", f"b/{rel}"))
    out.write_text("".join(parts), "utf-8")
    os.chmod(out, 0o644)
