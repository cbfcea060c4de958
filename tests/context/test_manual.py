"""The manual compaction gate (``proxy.context.manual``): the deployment switch, the floor of one
assistant turn, and the ``X-Context-Compact`` hint (``now`` only; ignored, and said so, where
manual compaction is off)."""

from __future__ import annotations

import pytest

from proxy.context import manual
from proxy.context.report import ContextReport
from proxy.errors import ApiError

TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def test_the_switch_and_the_floor() -> None:
    manual.require_enabled(True)
    with pytest.raises(ApiError) as off:
        manual.require_enabled(False)
    assert (off.value.status, off.value.code) == (403, "manual_compaction_disabled")
    manual.require_assistant_turn(TURNS)
    with pytest.raises(ApiError) as early:
        manual.require_assistant_turn(TURNS[:1])
    assert (early.value.status, early.value.code) == (409, "nothing_to_compact")


def test_the_hint_asks_only_with_now_and_only_where_it_is_on() -> None:
    assert manual.requested(None, True, TURNS) is False
    assert manual.requested(" NOW ", True, TURNS) is True
    assert manual.requested("now", False, TURNS) is False  # ignored here
    with pytest.raises(ApiError) as bad:
        manual.requested("later", True, TURNS)
    assert bad.value.param == manual.HEADER
    with pytest.raises(ApiError):
        manual.requested("now", True, TURNS[:1])
    assert manual.ignored("now", False) == {manual.IGNORED: "manual compaction is disabled on "
                                                             "this deployment"}
    assert manual.ignored("now", True) == {} and manual.ignored(None, False) == {}


def test_the_ignored_hint_is_merged_into_the_reports_other_notes() -> None:
    report = ContextReport("c", None, 1, 1, 1, 100, 0, "none", notes={"X-Other": "kept"})
    noted = manual.noted(report, "now", False)
    assert noted.notes == {"X-Other": "kept", manual.IGNORED: manual.ignored("now", False)[
        manual.IGNORED]}
    assert manual.noted(report, "now", True) is report
    assert manual.noted(report, None, False) is report
