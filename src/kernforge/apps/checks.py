"""The program's own check and its own timer, applied to one run.

A run passes when it exits 0 and its check passes: ``exit`` (nothing more), ``regex`` (the
pattern matches the output; the numbers its groups capture, every match in order, agree with
the reference under ``abs + rel * |reference|``), ``files`` (the output files agree with the
reference files under the same tolerance: numbers in text, elements of float32/float64 data,
or every byte). The reference is what the unmodified program printed or wrote in M1, or the
dataset's fixed ``expected`` values.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .manifest import UNITS, AppManifestError, Check, Dataset, Manifest, Timer
from .process import Ran

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)",
                    re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    error: float | None = None  # the largest measured difference (absolute), when compared


def regex_values(check: Check, text: str) -> list[float] | None:
    """Every number the pattern's groups capture, in order; None when it never matches."""
    assert check.pattern is not None
    rx = re.compile(check.pattern, re.MULTILINE)
    matches = list(rx.finditer(text))
    if not matches:
        return None
    out: list[float] = []
    for m in matches:
        for g in m.groups():
            try:
                out.append(float(g))
            except (TypeError, ValueError):
                out.append(math.nan)
    return out


_FAILED = re.compile(r"^.*\bFAIL(?:ED|URE)?\b.*$", re.MULTILINE)


def printed_failure(check: Check, text: str) -> str | None:
    """For a pass/fail check (a pattern without groups) that does not match ``text``: the
    first line where the program says it failed (FAIL, FAILED, FAILURE; after the line
    before it when it holds only that word); else None. The program's own check failed:
    not a pattern to fix."""
    if check.kind != "regex" or check.pattern is None or re.compile(check.pattern).groups:
        return None
    if regex_values(check, text) is not None:
        return None
    m = _FAILED.search(text)
    if m is None:
        return None
    line = " ".join(m.group(0).split())
    if line.rstrip(".!:") in ("FAIL", "FAILED", "FAILURE"):  # the word alone: what failed?
        before = [ln.strip() for ln in text[:m.start()].splitlines() if ln.strip()]
        line = f"{before[-1]} / {line}" if before else line
    return line[:200]


def _close(got: np.ndarray, ref: np.ndarray, check: Check) -> tuple[bool, float]:
    """Every element within ``abs + rel * |ref|`` (equal infinities agree, NaN never does);
    and the largest absolute difference."""
    if got.shape != ref.shape:
        return False, math.inf
    if got.size == 0:
        return True, 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - ref)
        each = (got == ref) | (np.isfinite(got) & (diff <= check.abs + check.rel * np.abs(ref)))
    finite = diff[np.isfinite(diff)]
    worst = float(finite.max()) if finite.size else 0.0
    if not bool(each.all()) and finite.size < diff.size:
        worst = math.inf
    return bool(each.all()), worst


def reference_dir(out: Path, dataset: Dataset) -> Path:
    return out / "reference" / dataset.name


def take_reference(m: Manifest, dataset: Dataset, ran: Ran, cwd: Path, out: Path
                   ) -> dict[str, Any]:
    """What the unmodified program printed or wrote (M1, first run); the check's reference.
    A pattern or an output file the program never produces is a manifest error."""
    check = m.check
    if check.kind == "regex":
        vals = regex_values(check, ran.output)
        if vals is None:
            raise AppManifestError(
                f"{m.path}: the check pattern {check.pattern!r} never matches the output of "
                f"dataset {dataset.name!r} ({ran.ended}); output ends: "
                f"{ran.tail(300)!r}",
                hint="fix [check] pattern so that it matches the line where the program "
                     "reports its own check")
        if dataset.expected and len(dataset.expected) != len(vals):
            raise AppManifestError(
                f"{m.path}: dataset {dataset.name!r} expects {len(dataset.expected)} "
                f"value(s) but the pattern captured {len(vals)}",
                hint="give one expected value per captured group and match")
        return {"values": vals}
    if check.kind == "files":
        dest = reference_dir(out, dataset)
        dest.mkdir(parents=True, exist_ok=True)
        for f in check.files:
            src = cwd / f
            if not src.is_file():
                raise AppManifestError(
                    f"{m.path}: dataset {dataset.name!r} did not write the check file {f!r} "
                    f"(looked for {src})",
                    hint="list in [check] files what the program writes, relative to the "
                         "source directory")
            shutil.copyfile(src, dest / Path(f).name)
        return {"files": list(check.files)}
    return {}


def verdict(m: Manifest, dataset: Dataset, ran: Ran, cwd: Path, out: Path,
            reference: dict[str, Any]) -> Verdict:
    """Does this run pass the program's own check?"""
    if ran.returncode != 0:
        return Verdict(False, ran.ended + (f": {ran.tail(200)}" if ran.tail(200) else ""))
    check = m.check
    if check.kind == "exit":
        return Verdict(True, "exit status 0")
    if check.kind == "regex":
        vals = regex_values(check, ran.output)
        if vals is None:
            failed = printed_failure(check, ran.output)
            return Verdict(False, f"it printed {failed!r}" if failed is not None else
                           f"the check pattern {check.pattern!r} did not match")
        if not vals and not dataset.expected:
            return Verdict(True, "the check pattern matched")
        ref = list(dataset.expected) or list(reference.get("values", []))
        ok, err = _close(np.asarray(vals, float), np.asarray(ref, float), check)
        what = f"{len(vals)} value(s) against {'expected' if dataset.expected else 'reference'}"
        return Verdict(ok, f"{what}: max |difference| {err:.3g}"
                           + ("" if ok else f" over the tolerance (abs {check.abs:g}, "
                                            f"rel {check.rel:g}); got {vals[:4]}, "
                                            f"want {ref[:4]}"), err)
    return _files(check, dataset, cwd, out)


def _files(check: Check, dataset: Dataset, cwd: Path, out: Path) -> Verdict:
    worst = 0.0
    for f in check.files:
        got_p, ref_p = cwd / f, reference_dir(out, dataset) / Path(f).name
        if not got_p.is_file():
            return Verdict(False, f"the program did not write {f}")
        got_b, ref_b = got_p.read_bytes(), ref_p.read_bytes()
        if check.format == "bytes" or got_b == ref_b:
            if got_b != ref_b:
                return Verdict(False, f"{f} differs from the reference (bytes)")
            continue
        if check.format == "text":
            got = np.asarray([float(x) for x in NUMBER.findall(got_b.decode("utf-8", "replace"))])
            ref = np.asarray([float(x) for x in NUMBER.findall(ref_b.decode("utf-8", "replace"))])
        else:
            dt = np.dtype(check.format)
            if len(got_b) % dt.itemsize or len(ref_b) % dt.itemsize:
                return Verdict(False, f"{f}: not a whole number of {check.format} elements")
            got = np.frombuffer(got_b, dt).astype(np.float64)
            ref = np.frombuffer(ref_b, dt).astype(np.float64)
        ok, err = _close(got, ref, check)
        worst = max(worst, err)
        if not ok:
            return Verdict(False, f"{f}: max |difference| {err:.3g} over the tolerance (abs "
                                  f"{check.abs:g}, rel {check.rel:g}) or another length", err)
    return Verdict(True, f"{len(check.files)} file(s) agree: max |difference| {worst:.3g}",
                   worst)


def seconds(timer: Timer, ran: Ran) -> float | None:
    """The run's time: the wall clock around the process, or the program's own printed time
    (the last match); None when the pattern is not in the output."""
    if timer.kind == "wall":
        return ran.seconds
    text = _printed(timer, ran)
    try:
        return None if text is None else float(text) * UNITS[timer.unit]
    except ValueError:
        return None


def printed_step(timer: Timer, ran: Ran) -> tuple[str, float] | None:
    """The program's printed time as it reads and the step of its last digit in seconds
    (``0.000030`` in s: 1e-6 s), None for the wall clock or a time not printed."""
    if timer.kind == "wall" or (text := _printed(timer, ran)) is None:
        return None
    m = re.fullmatch(r"[+-]?\d*(?:\.(\d*))?(?:[eE]([+-]?\d+))?", text.strip())
    if m is None:
        return None
    step = 10.0 ** (int(m.group(2) or 0) - len(m.group(1) or ""))
    return text.strip(), step * UNITS[timer.unit]


def _printed(timer: Timer, ran: Ran) -> str | None:
    assert timer.pattern is not None
    found = re.findall(timer.pattern, ran.output, re.MULTILINE)
    if not found:
        return None
    last = found[-1]
    return str(last[0] if isinstance(last, tuple) else last)
