"""``kernforge app run``: one application through the states and milestones.

States (ForgeStencil's App-Agent): PENDING -> OUT_OF_SCOPE | BLOCKED | RESEARCH | DROPPED |
INCONCLUSIVE | INTEGRATED. Milestones, each persisted with its status, reason and figures
(:mod:`kernforge.apps.store`) and skipped by a resumed run once settled:

- M1: build; run every dataset; the program's own check passes; baseline timed in
  interleaved rounds. Fails -> BLOCKED.
- M2: one dataset recorded; each kernel's share of the run; the Amdahl ceiling. Nothing
  recorded, or the replaceable kernels under ``min_share`` (5 %) of the run -> OUT_OF_SCOPE.
  With ``[integrate] sources``, the native units are bound to their source here
  (:mod:`.source_binding`).
- M3: the strategies in order (M3a operator matching, M3b tune/evolve, M3c agent). Nothing
  to integrate -> RESEARCH. A strategy redone after an interruption starts from scratch,
  except a ``resumable`` one (M3a keeps the units it finished).
- M4: end to end on every dataset, interleaved with and without; own check in both; the
  speed verdict (:mod:`kernforge.apps.endtoend`). "faster" -> INTEGRATED; "not faster" or a
  dataset conclusively below the floor (0.98x) -> DROPPED; "inconclusive" (busy or noisy,
  too few rounds) -> INCONCLUSIVE, nothing deployed and nothing called slower. An
  integration that deploys a fused path has the one-launch arm in the same rounds
  (:mod:`kernforge.apps.one_launch`): figures and words, not the verdict.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError, KernforgeError
from ..core.jsonio import parse_json, write_json_atomic
from . import endtoend, recording, source_binding, tree
from .checks import printed_failure
from .cuda_presence import refuse_without_gpu
from .harness import AppHarness, RunFailed
from .manifest import AppManifestError, Manifest
from .store import DB_NAME, FINAL, AppState, AppStore
from .strategies import Context, Outcome, strategies

Step = tuple[str, str, dict[str, Any], str | None]  # status, reason, figures, new state


@dataclass
class AppRun:
    manifest: Manifest
    out: Path
    resume: bool = False
    agent: str | None = None
    progress: Callable[[str], None] = lambda s: None

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        src = self.manifest.source
        if self.out == src or src in self.out.parents:
            raise AppManifestError(f"--out {self.out} is inside the program's source {src}",
                                   hint="write the run somewhere else: kernforge never "
                                        "writes into the program's directory")
        self.h = AppHarness(self.manifest, self.out, self.progress)
        self.agent = self.agent or self.manifest.integrate.agent
        self._interrupted = False  # the milestone in flight was begun by a killed run

    # ---- the run --------------------------------------------------------------------------
    def run(self) -> AppState:
        text = self.manifest.path.read_text("utf-8")
        sha = hashlib.sha256(text.encode()).hexdigest()
        if self.resume and not self.out.is_dir():  # a typo must not start a run from zero
            raise self._nothing_to_resume()
        self.out.mkdir(parents=True, exist_ok=True)
        lock = _lock(self.out)
        try:
            if self.resume and not (self.out / DB_NAME).is_file():
                raise self._nothing_to_resume()
            self.store = AppStore.open(self.out)
        except BaseException:
            os.close(lock)
            raise
        try:
            prior = self.store.app()
            if prior is None and self.resume:  # created, killed before its first row
                raise self._nothing_to_resume()
            if prior is not None and not self.resume:
                raise AppManifestError(f"{self.out} already holds a run of {prior.name} "
                                       f"({prior.state})",
                                       hint="pass --resume to continue it, or another --out")
            if prior is not None and prior.manifest_sha256 != sha:
                raise AppManifestError(f"{self.manifest.path} changed since the run in "
                                       f"{self.out} started",
                                       hint="start a new run (another --out) for the new "
                                            "manifest")
            if prior is None or prior.state not in FINAL:
                refuse_without_gpu(self.manifest)  # before anything runs: exit 3, resumable
            self.store.init(self.manifest.name, text, sha)
            for name, step in (("M1", self.m1), ("M2", self.m2), ("M3", self.m3),
                               ("M4", self.m4)):
                state = self.store.app()
                assert state is not None
                if state.state in FINAL:
                    break
                self._milestone(name, step)
            final = self.store.app()
            assert final is not None
            return final
        finally:
            self.store.close()
            os.close(lock)

    def _nothing_to_resume(self) -> ConfigError:
        return ConfigError(f"--out {self.out}: nothing to resume there (no run of "
                           f"kernforge app run was started in it)",
                           hint="check the path, or drop --resume to start a run there")

    def _milestone(self, name: str, step: Callable[[], Step]) -> None:
        done = self.store.milestone(name)
        if done is not None and done.settled:
            self.progress(f"{self.manifest.name}: {name} already done ({done.reason})")
            return
        self.progress(f"{self.manifest.name}: {name} started")
        self._interrupted = done is not None  # begun by a run that was killed: redo it
        self.store.begin(name)
        try:
            status, reason, figures, state = step()
        except AppManifestError as exc:
            self.store.finish(name, "FAILED", exc.message, {"error": "manifest"})
            raise
        self.store.finish(name, status, reason, figures)
        if state is None:
            self.progress(f"{self.manifest.name}: {name} {status.lower()}: {reason}")
            return
        # the run ends here: its reason is the final state's, said once (by the caller)
        self.store.set_state(state, f"{name}: {reason}", {"milestone": name})
        self.progress(f"{self.manifest.name}: {name} {status.lower()}; the run ends {state}")

    def _figures(self, name: str) -> dict[str, Any]:
        m = self.store.milestone(name)
        assert m is not None and m.settled, f"{name} is not done"
        return m.figures

    # ---- M1 -------------------------------------------------------------------------------
    def m1(self) -> Step:
        m, h = self.manifest, self.h
        first = self.out / "original-before-build.json"
        if not first.is_file():  # taken once: a resumed M1 must not count products as original
            write_json_atomic(first, tree.snapshot(m.source))
        before = parse_json(first.read_text("utf-8"))
        self.progress(f"{m.name}: building")
        b = h.build(m.source)
        figures: dict[str, Any] = {"build_s": b.seconds, "build_exit": b.returncode}
        if b.returncode != 0:
            return ("FAILED", f"the build failed ({b.ended}): {b.tail(400)}",
                    figures, "BLOCKED")
        checks = {}
        for d in m.datasets:
            self.progress(f"{m.name}: first run of {d.name}")
            ran = h.run(d, h.original())
            if ran.returncode != 0:
                return ("FAILED", (f"dataset {d.name} {ran.ended}: "
                        f"{ran.tail(400)}"), figures, "BLOCKED")
            failed = printed_failure(m.check, ran.output)
            if failed is not None:  # before the reference: not a pattern to fix
                why = f"dataset {d.name} fails its own check: it printed {failed!r}"
                return "FAILED", why, figures, "BLOCKED"
            h.reference(d, ran)
            v = h.check(d, h.original(), ran)
            if not v.ok:
                return ("FAILED", f"dataset {d.name} fails its own check: {v.reason}",
                        figures, "BLOCKED")
            checks[d.name] = v.reason
        tree.save_original(self.out, before, tree.snapshot(m.source))
        try:
            base = h.rounds(h.original(), m.measure.rounds)
        except RunFailed as exc:
            return "FAILED", f"a baseline run failed: {exc}", figures, "BLOCKED"
        figures.update(checks=checks, baseline=base, references=h.references,
                       timed_by=m.timer.describe())
        text = ", ".join(f"{n} {b['median_s']:.4g} s" for n, b in base.items())
        checked = ("exits 0 (its [check] is the exit status only: its outputs are not "
                   "compared)" if m.check.kind == "exit" else "passes its own check")
        why = (f"builds, runs and {checked} on {len(m.datasets)} dataset(s); "
               f"baseline medians {text} (time read from {m.timer.describe()})")
        return "DONE", why, figures, None

    def _load_references(self) -> None:
        if not self.h.references:
            self.h.references.update(self._figures("M1").get("references", {}))

    # ---- M2 -------------------------------------------------------------------------------
    def m2(self) -> Step:
        """Every dataset recorded (a replacement applies to the problem it was made for); the
        shares measured on the record dataset."""
        m, h = self.manifest, self.h
        self._load_references()
        d = m.dataset(m.record_dataset)
        figures: dict[str, Any] = {"dataset": d.name, "threshold": m.measure.min_share,
                                   "recording": str(self.out / "recording"), "problems": []}
        units: list[Path] = []
        for ds in sorted(m.datasets, key=lambda x: x.name != d.name):
            self.progress(f"{m.name}: recording dataset {ds.name}")
            ran, got, problems = recording.record_dataset(h, ds, self.out / "recording" / ds.name)
            figures["problems"] += problems
            if ran.returncode != 0:
                return ("FAILED", (f"{ds.name}: the program failed under the recorder "
                        f"({ran.ended}): {ran.tail(400)}"), figures, "BLOCKED")
            v = h.check(ds, h.original(), ran)
            if not v.ok:
                return ("FAILED", (f"{ds.name}: under the recorder the program fails its own "
                        f"check: {v.reason}"), figures, "BLOCKED")
            units += got
        bound = source_binding.bind_units(units, m.integrate)
        if bound:
            figures["sources"] = bound
        run_s = self._figures("M1")["baseline"][d.name]["median_s"]
        s = recording.shares(recording.kernel_times(self.out / "recording" / d.name, units),
                             run_s)
        figures.update(s)
        if not s["kernels"]:
            return ("DONE", recording.no_launch_reason(h.env(h.original())), figures,
                    "OUT_OF_SCOPE")
        f, ceil = s["candidate_share"], recording.ceiling_text(s["ceiling"])
        text = (f"{len(s['kernels'])} kernel(s), {s['units']} unit(s); the recorded kernels "
                f"take {100 * f:.1f} % of the run on {d.name} (Amdahl ceiling {ceil})")
        if bound:
            n = sum(v.startswith("bound to ") for v in bound.values())
            text += f"; {n} of {len(bound)} native unit(s) bound to their source"
        if not s["units"]:
            return ("DONE", (f"{text}: none could be recorded as a unit "
                    f"({figures['problems'][:3]})"), figures, "OUT_OF_SCOPE")
        if f < m.measure.min_share:
            return ("DONE", f"{text}: below the {100 * m.measure.min_share:g} % threshold",
                    figures, "OUT_OF_SCOPE")
        return "DONE", text, figures, None

    # ---- M3 -------------------------------------------------------------------------------
    def _outcomes(self) -> dict[str, Outcome]:
        """The strategies' outcomes of M3, from the database."""
        out = {}
        for name in self.manifest.integrate.strategies:
            ms = self.store.milestone(strategies.get(name).milestone)
            if ms is not None:
                out[name] = Outcome.from_json(ms.status, ms.reason, ms.figures)
        return out

    def m3(self) -> Step:
        m = self.manifest
        self._load_references()
        m2 = self._figures("M2")
        earlier: dict[str, Outcome] = {}
        for name in m.integrate.strategies:
            cls = strategies.get(name)
            ms = self.store.milestone(cls.milestone)
            if ms is not None and ms.status in ("DONE", "SKIPPED", "FAILED"):
                earlier[name] = Outcome.from_json(ms.status, ms.reason, ms.figures)
                continue
            ctx = Context(m, self.h, self.out, m2["kernels"], m2["run_s"], dict(earlier),
                          self.progress, self.agent)
            self.progress(f"{m.name}: {cls.milestone} {cls.title}")
            if ms is not None and not cls.resumable:  # begun by a run that was killed:
                _empty(cls.workdir(self.out))  # redone from scratch
            self.store.begin(cls.milestone)
            try:
                o = cls().apply(ctx)
            except KernforgeError as exc:  # a tool's typed refusal: this strategy's failure
                o = Outcome("FAILED", f"{type(exc).__name__}: {exc.message}",
                            {"hint": exc.hint})
            self.store.finish(cls.milestone, o.status, o.reason, o.to_json())
            self.progress(f"{m.name}: {cls.milestone} {o.status.lower()}: "
                          f"{brief(o.reason, self.out)}")
            earlier[name] = o
        tried = {strategies.get(n).milestone: f"{o.status}: {o.reason}"
                 for n, o in earlier.items()}
        used = [n for n, o in earlier.items() if o.integrates]
        if not used:
            return "DONE", "no strategy produced anything to integrate: " + "; ".join(
                f"{k} {v}" for k, v in tried.items()), {"strategies": tried}, "RESEARCH"
        return "DONE", f"to integrate: {', '.join(used)}", {"strategies": tried,
                                                            "used": used}, None

    # ---- M4 -------------------------------------------------------------------------------
    def m4(self) -> Step:
        m = self.manifest
        self._load_references()
        outcomes = [o for n, o in self._outcomes().items() if o.integrates]
        if self._interrupted:  # what an interrupted M4 merged or logged is not this one's
            _empty(self.out / "m4")
        try:
            setup, info = endtoend.integrate(outcomes, self.out, m.source)
        except KernforgeError as exc:  # e.g. a spec that does not read back: deploy nothing
            endtoend.write_integration(self.out, self.h.original(), {}, deployed=False)
            return ("FAILED", (f"the integration cannot be put together ({exc.message}): "
                    "nothing is deployed"), {"hint": exc.hint}, "DROPPED")
        arm = endtoend.one_launch_arm(outcomes, self.out, m.source, info,
                                      m.integrate.compare_one_launch)
        state, reason, figures = endtoend.measure(self.h, setup, m.measure.e2e_rounds,
                                                  m.measure.floor, fused=bool(info.get("fused")),
                                                  arm=arm)
        touched = tree.changed(m.source, tree.load_original(self.out))
        figures.update(integration=info, original_unchanged=not touched,
                       setup=setup.to_json())
        if touched:
            state, reason = "BLOCKED", f"the original program's files changed: {touched[:5]}"
        endtoend.write_integration(self.out, setup, info, deployed=state == "INTEGRATED")
        return ("DONE" if state == "INTEGRATED" else "FAILED"), reason, figures, state


def _empty(directory: Path) -> None:
    """Remove what an earlier, interrupted attempt of a milestone left in ``directory``."""
    if directory.is_dir() and not directory.is_symlink():
        shutil.rmtree(directory)
    elif directory.exists() or directory.is_symlink():
        directory.unlink()


LOCK_NAME = "app.lock"


def _lock(out: Path) -> int:
    """An exclusive lock on the run directory for as long as this run holds it (released
    by the kernel when the process dies, so a killed run leaves nothing to clean up): two
    runs on one --out would redo the same milestones and overwrite each other's logs."""
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise ConfigError(f"{out} is in use by another kernforge app run"
                          + (f" (pid {holder})" if holder else ""),
                          hint="wait for it to finish (then --resume if needed), or give "
                               "another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def brief(reason: str, out: Path, width: int = 240) -> str:
    """A strategy's reason as its progress line shows it: whole when short, else cut at a word
    and marked with where to read it whole (``kernforge app report`` of the run; app run's
    last line is the final state's reason only)."""
    return textwrap.shorten(reason, width=width,
                            placeholder=f" ... (in full: kernforge app report {out})")
