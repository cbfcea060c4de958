"""The fake upstream's in-band compaction (``proxy.testing.fake.fake_compaction``): the items it
issues, how the responder reads them, what it refuses."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson

from proxy.testing.fake import fake_compaction as fc


def body(items: list[Any]) -> dict[str, Any]:
    return {"model": "m", "input": items}


def test_an_issued_item_carries_its_summary_and_a_foreign_one_is_unread() -> None:
    item = fc.issue("FACT-01: x")
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert fc.issued_summary(item) == "FACT-01: x"
    assert fc.issued_summary({**item, "encrypted_content": "not base64!"}) is None
    assert fc.issued_summary({"type": "compaction", "encrypted_content": "cpx1.e30.0"}) is None


def test_the_responder_reads_the_summary_in_place_of_what_it_covers() -> None:
    item = fc.issue("the summary")
    got = fc.expanded(body([{"role": "user", "content": "old"}, item,
                            {"role": "user", "content": "new"}]))
    assert got["input"] == [{"type": "message", "role": "user", "content": "the summary"},
                            {"role": "user", "content": "new"}]
    plain = body([{"role": "user", "content": "x"}])
    assert fc.expanded(plain) is plain


def test_refusals_name_the_item_in_the_apis_shape() -> None:
    serving, not_serving = (SimpleNamespace(serves_compaction_trigger=v) for v in (True, False))
    trigger = body([{"role": "user", "content": "x"}, {"type": "compaction_trigger"}])
    assert fc.refusal(serving, trigger) is None  # type: ignore[arg-type]
    refused = fc.refusal(not_serving, trigger)  # type: ignore[arg-type]
    assert refused is not None and refused.status == 400
    error = orjson.loads(refused.body)["error"]  # type: ignore[arg-type]
    assert "'compaction_trigger'" in error["message"] and error["param"] == "input"
    assert error["type"] == "invalid_request_error"
    foreign = body([{"type": "compaction", "encrypted_content": "elsewhere"}])
    assert fc.refusal(not_serving, foreign) is not None  # type: ignore[arg-type]
    assert fc.refusal(not_serving, body([fc.issue("s")])) is None  # type: ignore[arg-type]
    assert fc.refusal(serving, foreign) is None  # type: ignore[arg-type]
