"""Parsing and applying replies: SEARCH/REPLACE blocks, rewrites, and why a reply failed."""

from __future__ import annotations

from kernforge.evolve.patch import PatchError, apply_reply, closest_line, parse_reply

SRC = """__global__ void k(float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = 2.0f * b[i];
}
"""


def _blocks(*pairs: tuple[str, str]) -> str:
    return "\n".join(f"<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE" for s, r in pairs)


def test_single_block_exact() -> None:
    r = apply_reply(SRC, "Here:\n" + _blocks(("    if (i < n) a[i] = 2.0f * b[i];",
                                              "    if (i < n) a[i] = b[i] + b[i];")))
    assert r.ok and r.mode == "diff" and "b[i] + b[i]" in (r.code or "")


def test_multiple_blocks_inside_a_fence_with_language_tag() -> None:
    reply = "```cuda\n" + _blocks(("float* a", "float* __restrict__ a"),
                                  ("const float* b", "const float* __restrict__ b")) + "\n```"
    r = apply_reply(SRC, reply)
    assert r.ok and r.applied == 2
    assert "float* __restrict__ a, const float* __restrict__ b" in (r.code or "")


def test_whitespace_insensitive_fallback() -> None:
    search = "int i = blockIdx.x*blockDim.x  +  threadIdx.x;".replace("*", " * ")
    r = apply_reply(SRC, _blocks(("  " + search + "   ", "    int i = threadIdx.x;")))
    assert r.ok, r.message
    assert "int i = threadIdx.x;" in (r.code or "") and "blockIdx" not in (r.code or "")


def test_search_not_found_names_the_closest_line() -> None:
    r = apply_reply(SRC, _blocks(("    if (i < m) a[i] = 3.0f * b[i];", "x")))
    assert r.kind is PatchError.SEARCH_NOT_FOUND
    assert "closest line 4" in r.message and "a[i] = 2.0f" in r.message
    assert closest_line(SRC, "int i = blockIdx")[0] == 3


def test_ambiguous_match() -> None:
    r = apply_reply(SRC, _blocks(("float*", "double*")))
    assert r.kind is PatchError.AMBIGUOUS and "2 places" in r.message


def test_full_rewrite_from_fence_and_no_change() -> None:
    new = SRC.replace("2.0f", "2.f")
    r = apply_reply(SRC, f"I rewrote it:\n```cuda\n{new}```\nDone.")
    assert r.ok and r.mode == "rewrite" and "2.f" in (r.code or "")
    assert apply_reply(SRC, f"```c++\n{SRC}```").kind is PatchError.NO_CHANGE


def test_longest_code_fence_wins_and_prose_fences_ignored() -> None:
    reply = f"```text\nnot code\n```\n```\nint x;\n```\n```cpp\n{SRC.replace('2.0f', '4.0f')}```"
    assert parse_reply(reply).rewrite is not None
    r = apply_reply(SRC, reply)
    assert r.ok and "4.0f" in (r.code or "")


def test_no_blocks_empty_and_malformed() -> None:
    assert apply_reply(SRC, "I think it is fine.").kind is PatchError.NO_BLOCKS
    assert apply_reply(SRC, "```cuda\n\n```").kind is PatchError.EMPTY_RESULT
    whole = SRC.rstrip("\n")
    assert apply_reply(SRC, _blocks((whole, ""))).kind is PatchError.EMPTY_RESULT
    bad = "<<<<<<< SEARCH\nfloat* a\n=======\nfloat* b\n"
    r = apply_reply(SRC, bad)
    assert r.kind is PatchError.MALFORMED and "REPLACE" in r.message


def test_empty_search_is_reported() -> None:
    r = apply_reply(SRC, _blocks(("", "int x;")))
    assert r.kind is PatchError.SEARCH_NOT_FOUND and "empty" in r.message
