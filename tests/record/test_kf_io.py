"""The interposer's JSON text buffer (kf_io.c) compiled with the host C compiler into a small
program: the real functions, with the interposer's other symbols defined empty around them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "src" / "kernforge" / "record" / "native"

HARNESS = r"""
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>
#include "kf.h"
unsigned long n_launches, n_recorded, n_budget, n_unknown, n_failed;
unsigned long kf_n_cooperative, kf_n_graphs;
const char *root;
void kf_log(const char *fmt, ...) { (void)fmt; }
size_t kf_fn_all(kf_fn_t ***out) { *out = NULL; return 0; }
int kf_recording(void) { return 0; }
void kf_deploy_report(void) {}
void kf_defer_flush(void) {}

int main(int argc, char **argv) {
  setlocale(LC_ALL, "C");
  if (argc > 1) { /* argv[1] as a JSON string on stdout */
    buf_t b = {malloc(4), 0, 4};
    kf_put_str(&b, argv[1]);
    fwrite(b.s, 1, b.n, stdout);
    return 0;
  }
  /* U+00E9 has no encoding in the C locale: vsnprintf returns -1 (EILSEQ) */
  buf_t b = {malloc(16), 0, 16};
  kf_put(&b, "ok");
  kf_put(&b, "%ls", L"\u00e9");
  kf_put(&b, "more");
  printf("%s %zu %zu\n", b.s ? "kept" : "failed", b.n, b.cap);
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kf_io")
    (d / "harness.c").write_text(HARNESS)
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", f"-I{NATIVE}", "-o", str(d / "harness"),
                    str(d / "harness.c"), str(NATIVE / "kf_io.c")], check=True,
                   capture_output=True)
    return d / "harness"


def test_an_encoding_error_marks_the_buffer_failed_at_once(harness: Path) -> None:
    """vsnprintf's -1 was taken for "too small": the buffer doubled until realloc failed
    (tens of GiB reserved, without end where memory is overcommitted). It fails at once."""
    done = subprocess.run([str(harness)], capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout.split() == ["failed", "0", "0"]


def test_put_str_passes_utf8_and_escapes_controls(harness: Path) -> None:
    import json

    raw = "é€𝄞 \"q\" \\ \x01\x1f\x7f tab\t".encode() + b" bad\xff\xe2\x82 \xed\xa0\x80"
    done = subprocess.run([str(harness), raw], capture_output=True, timeout=30, check=True)
    assert done.stdout.startswith('"é€𝄞 \\"q\\" \\\\ \\u0001\\u001f\\u007f tab\\u0009'.encode())
    assert json.loads(done.stdout.decode("utf-8")) == raw.decode("utf-8", "replace")
