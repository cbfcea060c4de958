"""What a compaction's summary covers (``proxy.context.stages.covered``): the client's index
range and the tool outputs in it, each a spill with the id masking would give it."""

from __future__ import annotations

from factories import assistant, system, tool_turn, user, words

from proxy.context.stages.covered import covered
from proxy.context.stages.mask import spill_id
from proxy.context.stages.shared import format_summary
from proxy.context.tokens.counter import TokenCounter


def test_the_outputs_summarized_are_listed_with_their_spills() -> None:
    msgs = [system(), user(), *tool_turn("read_file", words(50, 1)), assistant("ok"),
            *tool_turn("grep", words(30, 2)), user("next")]
    took = covered(msgs, list(range(len(msgs))), [2, 3, 4, 5, 6], TokenCounter(), "gpt-4o")
    assert took.turns() == [2, 7]
    assert [(o["tool"], o["spill_id"]) for o in took.listed()] == [
        ("read_file", spill_id(msgs[3]["content"])), ("grep", spill_id(msgs[6]["content"]))]
    assert all(o["tokens"] >= 30 for o in took.listed())
    assert [s.index for s in took.outputs] == [3, 6]


def test_an_earlier_summary_is_not_counted_and_indices_are_the_clients() -> None:
    earlier = {"role": "user", "content": format_summary("Earlier work.")}
    view = [system(), earlier, *tool_turn("read_file", "x" * 40), user("go")]
    origin = [0, -1, 9, 10, 11]
    took = covered(view, origin, [1, 2, 3], TokenCounter(), "gpt-4o")
    assert took.turns() == [9, 11] and [s.index for s in took.outputs] == [10]
    assert covered(view, origin, [1], TokenCounter(), "gpt-4o").turns() == [0, 0]
