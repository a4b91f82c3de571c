"""The manifest's bad inputs are typed errors (exit 2) naming the key and what to do."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernforge.apps.manifest import AppManifestError, load_manifest
from kernforge.cli.main import main
from kernforge.core import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "apps" / "heat3d_cpu.toml"


def _write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "prog").mkdir(exist_ok=True)
    p = tmp_path / "app.toml"
    p.write_text(textwrap.dedent(body))
    return p


GOOD = """
    name = "prog"
    source = "prog"
    build = "true"
    [[datasets]]
    name = "small"
    run = "echo 'result 1.5'"
    [[datasets]]
    name = "large"
    run = "echo 'result 3.0'"
    expected = [3.0]
    [check]
    kind = "regex"
    pattern = 'result ([0-9.]+)'
    rel = 1e-6
    """


def test_a_good_manifest_and_the_example_load(tmp_path: Path) -> None:
    m = load_manifest(_write(tmp_path, GOOD))
    assert m.name == "prog" and m.source == (tmp_path / "prog").resolve()
    assert [d.name for d in m.datasets] == ["small", "large"] and m.record_dataset == "small"
    assert m.check.kind == "regex" and m.datasets[1].expected == (3.0,)
    assert m.timer.kind == "wall" and m.switch == "environment" and m.measure.floor == 0.98
    ex = load_manifest(EXAMPLE)
    assert ex.name == "heat3d-cpu" and (ex.source / "heat3d_cpu.py").is_file()
    assert ex.record_dataset == "n96" and len(ex.datasets) == 2
    assert m.integrate.lift_search_trials == 16  # the lifted operators' search budget
    off = load_manifest(_write(tmp_path, GOOD + "[integrate]\nlift_search_trials = 0\n"))
    assert off.integrate.lift_search_trials == 0
    assert m.integrate.compare_one_launch is True  # M4's one-launch arm beside a fused path
    off = load_manifest(_write(tmp_path, GOOD + "[integrate]\ncompare_one_launch = false\n"))
    assert off.integrate.compare_one_launch is False
    assert m.integrate.narrow_after_first == 4  # M3a: a kernel's later datasets, narrowed
    off = load_manifest(_write(tmp_path, GOOD + "[integrate]\nnarrow_after_first = 0\n"))
    assert off.integrate.narrow_after_first == 0


@pytest.mark.parametrize("body, match, hint", [
    ("colour = 'red'\n" + GOOD, "unknown key 'colour' in the manifest", "allowed keys"),
    (GOOD.replace("rel = 1e-6", "rel = 1e-6\nrelative = 1"), "unknown key 'relative' in \\[check\\]", "allowed keys in \\[check\\]"),
    (GOOD.replace('run = "echo \'result 1.5\'"', ""), "datasets\\[0\\]: missing key 'run'",
     "command that runs the program"),
    (GOOD.replace('build = "true"', ""), "missing key 'build'", "build = \\\"true\\\""),
    (GOOD.replace('source = "prog"', 'source = "nowhere"'), "does not exist",
     "directory that holds the program"),
    (GOOD.replace("'result ([0-9.]+)'", "'result ([0-9.]+'"), "not a regular expression",
     "Python regular expression"),
    (GOOD.replace('kind = "regex"', 'kind = "eyeball"'), "'kind' is 'eyeball'",
     "exit, regex, files"),
    (GOOD.replace("[[datasets]]", "[[sets]]", 1), "unknown key 'sets'", "allowed keys"),
    ("name = 'x'\nsource = 'prog'\nbuild = 'true'\n", "no \\[\\[datasets\\]\\]",
     "at least one"),
    (GOOD + "[measure]\nfloor = 'high'\n", "'floor' must be a number", "floor = 0.98"),
    (GOOD + "[switch]\nkind = 'patch'\n", "'kind' is 'patch'", "environment"),
    ("name = 'x'\nsource = [1\n", "not valid TOML", "syntax"),
    # found in review: each of these was a traceback, an escape from --out or a late failure
    (GOOD.replace("run = \"echo 'result 1.5'\"", "run = \"echo 'result\""),
     "cannot be split into words", "close every quote"),
    (GOOD.replace('build = "true"', "build = \"sh -c 'make\""), "build = .* cannot be split",
     "close every quote"),
    (GOOD + "[timer]\nkind = 'regex'\npattern = 'took (['\n", "\\[timer\\]: .*not a regular",
     "Python regular expression"),
    (GOOD.replace('name = "small"', 'name = "../../elsewhere"'), "not a plain name",
     "letters, digits"),
    (GOOD.replace("rel = 1e-6", "rel = nan"), "'rel' must be a number >= 0, not nan",
     "rel = 0.0"),
    (GOOD + "[integrate]\nevolve_config = 'evolve.yaml'\n", "evolve_config .*no file",
     "evolve YAML"),
    (GOOD + "[integrate]\nagent = \"my-agent '\"\n", "agent = .* cannot be split",
     "close every quote"),
    (GOOD.replace('expected = [3.0]', 'expected = [3.0]\ntimeout_s = 10'),
     "'timeout_s' is read as a key of this dataset", "above the first \\[\\[datasets"),
    (GOOD + "[integrate]\nnarrow_after_first = \"4\"\n",
     "'narrow_after_first' must be an integer >= 0, not '4'", "narrow_after_first = 4"),
    (GOOD + "[integrate]\nnarrow_after_first = 1.5\n",
     "'narrow_after_first' must be an integer", "narrow_after_first = 4"),
    (GOOD + "[integrate]\nlift_search_trials = -1\n",
     "'lift_search_trials' must be an integer >= 0", "lift_search_trials = 16"),
    (GOOD + "[integrate]\ncompare_one_launch = \"no\"\n",
     "'compare_one_launch' must be true or false, not 'no'", "compare_one_launch = true"),
    (GOOD + "[integrate]\ncompare_one_launch = 0\n",
     "'compare_one_launch' must be true or false, not 0", "no quotes"),
    # an empty list used to be accepted: nothing integrated, the app ended RESEARCH silently
    (GOOD + "[integrate]\nstrategies = []\n", "strategies = \\[\\] names no strategy",
     "operator, .*tune"),
])
def test_bad_manifests_are_typed_errors(tmp_path: Path, body: str, match: str,
                                        hint: str) -> None:
    with pytest.raises(AppManifestError, match=match) as exc:
        load_manifest(_write(tmp_path, body))
    assert isinstance(exc.value, ConfigError) and exc.value.exit_code == 2
    assert exc.value.hint is not None
    import re
    assert re.search(hint, exc.value.hint), exc.value.hint


def test_a_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(AppManifestError, match="cannot read the manifest"):
        load_manifest(tmp_path / "none.toml")


def test_the_cli_exits_2_on_a_bad_manifest(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path, "colour = 'red'\n" + GOOD)
    assert main(["app", "run", str(p), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'colour'" in err and "hint" in err


def test_a_check_that_never_matches_is_rejected_in_m1(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    p = _write(tmp_path, GOOD.replace("'result ([0-9.]+)'", "'checksum ([0-9.]+)'"))
    assert main(["app", "run", str(p), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "never matches the output of dataset 'small'" in err and "[check]" in err
    from kernforge.apps.store import AppStore
    store = AppStore.open(tmp_path / "run")
    m1 = store.milestone("M1")
    assert m1 is not None and m1.status == "FAILED" and "never matches" in m1.reason
    assert store.app().state == "PENDING"  # type: ignore[union-attr]  # bad input, no state


def test_a_timer_that_never_matches_is_rejected(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD + "[timer]\nkind = 'regex'\npattern = 'took ([0-9.]+) s'\n")
    assert main(["app", "run", str(p), "--out", str(tmp_path / "run")]) == 2


def test_expected_values_are_checked_against_the_program(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("expected = [3.0]", "expected = [3.5]"))
    assert main(["app", "run", str(p), "--out", str(tmp_path / "run")]) == 0
    from kernforge.apps.store import AppStore
    app = AppStore.open(tmp_path / "run").app()
    assert app is not None and app.state == "BLOCKED" and "large fails its own check" in \
        app.reason


def test_a_manifest_without_check_says_what_to_write(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 8: a manifest without [check] silently checked only the exit status, and
    M1 then said the program "passes its own check"."""
    body = GOOD.split("    [check]")[0]
    with pytest.raises(AppManifestError, match="no \\[check\\]") as info:
        load_manifest(_write(tmp_path, body))
    hint = info.value.hint or ""
    assert 'kind = "regex"' in hint and 'kind = "exit"' in hint
    with pytest.raises(AppManifestError, match="no kind"):
        load_manifest(_write(tmp_path, body + "    [check]\n    rel = 1e-6\n"))
    assert main(["app", "run", str(_write(tmp_path, body)), "--out",
                 str(tmp_path / "run")]) == 2
    assert "no [check]" in capsys.readouterr().err
    m = load_manifest(_write(tmp_path, body + '    [check]\n    kind = "exit"\n'))
    assert m.check.kind == "exit"  # opting in to the exit status alone, explicitly


def test_an_exit_status_check_is_worded_as_one(tmp_path: Path) -> None:
    from kernforge.apps.workflow import AppRun

    body = GOOD.split("    [check]")[0].replace("    expected = [3.0]\n", "")
    m = load_manifest(_write(tmp_path, body + '    [check]\n    kind = "exit"\n'
                                              "    [measure]\n    rounds = 1\n"))
    status, why, _figures, _block = AppRun(m, tmp_path / "run").m1()
    assert status == "DONE", why
    assert "exits 0 (its [check] is the exit status only" in why
    assert "passes its own check" not in why
