"""What ``app draft`` reads from the sources of a program as its check and timer
(apps/draft_output.py): the guesses are matched against what such a program prints."""

from __future__ import annotations

import re
from pathlib import Path

from kernforge.apps.draft_output import guess


def test_a_failure_message_with_error_in_it_is_no_check(tmp_path: Path) -> None:
    # an option parser's and a reader's messages on their failure paths; the value the
    # program checks is printed elsewhere
    (tmp_path / "main.cu").write_text(r"""
        void parse() {
          cout << "Internal error: used option long name '" << longName << "' twice.\n";
          std::cerr << "Error reading data on line " << lc + 1 << "\n";
        }
        int main() {
          std::cout << "Error = " << err << " %\n";
          printf("Average execution time of kernels: %f milliseconds\n", t);
        }""")
    check, timer, _ = guess(tmp_path)
    assert check.numeric
    out = "Error reading data on line 3\nError = 1.5e-06 %\n"
    assert re.findall(check.pattern, out) == ["1.5e-06"]
    assert timer is not None and timer.unit == "ms"


def test_only_failure_messages_give_the_exit_status_check(tmp_path: Path) -> None:
    (tmp_path / "main.cu").write_text(r"""
        int main() {
          cout << "Internal error: used option long name '" << longName << "' twice.\n";
          printf("Average time of executing kernels: %lf (us)\n", t);
        }""")
    check, _, _ = guess(tmp_path)
    assert check.kind == "exit"


def test_a_qualified_error_norm_is_still_a_check(tmp_path: Path) -> None:
    (tmp_path / "main.cu").write_text(r"""
        int main() {
          printf("Checksum: min_u, max_u = %e %e\n", lo, hi);
          printf("final error (Euclidean norm): %.9e\n", e);
        }""")
    check, _, _ = guess(tmp_path)
    assert check.numeric
    assert re.findall(check.pattern, "Checksum: min_u, max_u = 1e-3 2e-3\n") == ["1e-3"]


def test_a_line_with_a_host_and_a_kernel_time_gives_the_kernel_time(tmp_path: Path) -> None:
    (tmp_path / "main.cu").write_text(r"""
        int main() {
          printf("Normsq result: %.8e  diff: %.3e  verify: %s  host time: %.3f (s) "
                 "kernel time: %.3f (s)\n", n, d, ok ? "PASS" : "FAIL", th, tk);
        }""")
    _, timer, others = guess(tmp_path)
    assert timer is not None and timer.unit == "s"
    line = "Normsq result: 1e+00  diff: 0e+00  verify: PASS  host time: 2.500 (s) " \
           "kernel time: 0.125 (s)\n"
    assert re.findall(timer.pattern, line) == ["0.125"]
    assert others == []


def test_a_time_printed_twice_is_listed_once(tmp_path: Path) -> None:
    (tmp_path / "main.cu").write_text(r"""
        void a() { printf("Total time %lf secs \n", total_time * 1e-9); }
        void b() { printf("Total time %lf secs \n", total_time * 1e-9); }
        int main() { printf("Average kernel execution time: %f (us)\n", t); }""")
    _, timer, others = guess(tmp_path)
    assert timer is not None and timer.unit == "us"
    assert [o.pattern for o in others] == [r"Total time *([0-9.eE+-]+) *secs"]


def test_a_verdict_with_the_failure_first(tmp_path: Path) -> None:
    # iso2dfd: std::cout << (error ? "FAIL" : "PASS") << std::endl;
    (tmp_path / "main.cu").write_text(r"""
        int main() {
          error = within_epsilon(out, ref, n);
          std::cout << (error ? "FAIL" : "PASS") << std::endl;
        }""")
    check, _, _ = guess(tmp_path)
    rx = re.compile(check.pattern, re.MULTILINE)
    assert rx.search("Host time: 3 ms\nPASS\nFinished.\n")
    assert not rx.search("Host time: 3 ms\nFAIL\nFinished.\n")


def test_a_time_after_a_count_in_one_sentence(tmp_path: Path) -> None:
    # laplace: printf("Total time for %i iterations: %f s\n", iter, runtime / 1000.0);
    (tmp_path / "main.cu").write_text(r"""
        int main() {
          printf("Total time for %i iterations: %f s\n", iter, runtime / 1000.0);
          printf("%s\n", count == 0 ? "PASS" : "FAIL");
        }""")
    _, timer, _ = guess(tmp_path)
    assert timer is not None and timer.unit == "s"
    out = "Total time for 4210 iterations: 1.250000 s\nPASS\n"
    assert re.findall(timer.pattern, out) == ["1.250000"]
