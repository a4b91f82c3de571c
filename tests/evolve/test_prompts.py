"""Prefix-cache-aware prompts: static content first, R3 inspiration ordering, parent last."""

from __future__ import annotations

from kernforge.core import Status
from kernforge.evolve.prompts import PromptBuilder, PromptStatic, order_inspirations
from kernforge.evolve.types import Program, ProposalRequest
from kernforge.llm.fake_server import render_prompt
from kernforge.llm.tokens import common_prefix, tokenize


def prog(pid: str, fitness: float | None = 1e-4, island: int = 0) -> Program:
    return Program(id=pid, code=f"__global__ void k() {{ /* {pid} */ }}", parent_id=None,
                   island=island, generation=0, fitness=fitness,
                   status=Status.OK if fitness else Status.WRONG_RESULT)


def ids(programs: list[Program]) -> list[str]:
    return [p.id for p in programs]


def test_r3_ordering_reuses_the_longest_recent_prefix() -> None:
    a, b, c, d, e = (prog(x, f) for x, f in zip("abcde", (5e-4, 4e-4, 3e-4, 2e-4, 1e-4)))
    recent = [("a", "b", "x"), ("c", "a", "x", "d"), ("e",)]
    # ("a", "b") is the longest prefix made only of sampled programs; the others follow,
    # best (fastest) first
    assert ids(order_inspirations([a, b, c, d, e][::-1], recent)) == ["a", "b", "e", "d", "c"]
    assert ids(order_inspirations([b, a], [])) == ["b", "a"]
    assert ids(order_inspirations([b, a], [], [("a", "b")])) == ["a", "b"]


def test_layout_static_first_parent_last_and_cache_key() -> None:
    builder = PromptBuilder(PromptStatic(hardware="H200", reference="ORIGINAL"))
    parent = prog("parent", 2e-4)
    p = builder.build(ProposalRequest(island=2, parent=parent,
                                      inspirations=(prog("i1"), parent, prog("i2")),
                                      contract="CONTRACT"))
    system, user = p.messages[0]["content"], p.messages[1]["content"]
    assert p.messages[0]["role"] == "system" and p.cache_key.endswith("island-2")
    for word in ("H200", "CONTRACT", "ORIGINAL", "SEARCH"):
        assert word in system
    assert "parent" not in system and p.order == ("i1", "i2")
    assert user.index("i1") < user.index("i2") < user.index("# Current program")
    assert user.index("# Current program") > user.rindex("/* i2 */")


def test_consecutive_prompts_share_a_long_prefix() -> None:
    builder = PromptBuilder(PromptStatic(reference="x " * 200))
    pool = [prog(f"p{i}", 1e-4 * (i + 1)) for i in range(6)]
    first = builder.build(ProposalRequest(0, pool[5], (pool[3], pool[0], pool[1]), "C"))
    second = builder.build(ProposalRequest(0, pool[4], (pool[1], pool[0], pool[2]), "C"))
    assert first.order[:2] == ("p0", "p1") and second.order[:2] == ("p0", "p1")
    t1, t2 = (tokenize(render_prompt(p.messages)) for p in (first, second))
    assert common_prefix(t1, t2) / len(t2) > 0.6
