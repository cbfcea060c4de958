"""The console's "Context & retrieval" pages (``proxy.console.policy``), in process on the
suite's store: the form writes only changed fields through the admin API's checks (a refused
value re-rendered with its field named and what was typed kept), the rerank toggle, clearing
one field or the whole layer, the platform's read-only page."""

from __future__ import annotations

import pytest
from aiohttp import web
from inproc import form, request

from proxy.console.policy import (
    clear_confirm,
    clear_field,
    clear_layer,
    platform_page,
    policy_page,
    policy_save,
    policy_url,
    rerank_toggle,
)
from proxy.console.session import PATH
from proxy.state import STATE

ACME = {"org": "acme"}


def test_policy_urls_quote_their_names() -> None:
    assert policy_url("acme", None) == PATH + "orgs/acme/policy"
    assert policy_url("a b", "c/d") == PATH + "orgs/a%20b/users/c%2Fd/policy"


async def test_the_form_writes_changed_fields_and_a_refusal_keeps_what_was_typed(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    cookie, csrf = signed_in
    policies = console_app[STATE].policies
    with pytest.raises(web.HTTPSeeOther) as saved:
        await policy_save(form(console_app, "/", {"csrf": csrf, "rerank.keep": "3"}, cookie,
                               ACME))
    assert saved.value.location.endswith("/orgs/acme/policy?done=saved")
    assert policies.resolve("acme").rerank.keep == 3
    with pytest.raises(web.HTTPSeeOther) as same:
        await policy_save(form(console_app, "/", {"csrf": csrf, "rerank.keep": "3"}, cookie,
                               ACME))
    assert same.value.location.endswith("done=unchanged")
    refused = await policy_save(form(console_app, "/", {"csrf": csrf, "rerank.keep": "lots"},
                                     cookie, ACME))
    assert refused.status == 400 and "lots" in (refused.text or "")
    assert policies.resolve("acme").rerank.keep == 3  # nothing written
    page = await policy_page(request(console_app, "GET", "/", headers=cookie, match_info=ACME))
    assert page.status == 200 and "rerank.keep" in (page.text or "")


async def test_the_rerank_toggle_and_clearing_a_field_or_the_layer(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    cookie, csrf = signed_in
    policies = console_app[STATE].policies
    bob = {"org": "acme", "user": "bob"}
    with pytest.raises(web.HTTPSeeOther) as on:
        await rerank_toggle(form(console_app, "/", {"csrf": csrf, "enabled": "true"}, cookie, bob))
    assert on.value.location.endswith("/users/bob/policy?done=rerank-on")
    assert policies.resolve("acme", "bob").rerank.enabled
    bad = await rerank_toggle(form(console_app, "/", {"csrf": csrf, "enabled": "yes"}, cookie,
                                   bob))
    assert bad.status == 400
    confirm = await clear_confirm(request(console_app, "GET", "/", headers=cookie,
                                          match_info=bob))
    assert "rerank.enabled" in (confirm.text or "")
    with pytest.raises(web.HTTPSeeOther):
        await clear_field(form(console_app, "/", {"csrf": csrf, "field": "rerank.enabled"},
                               cookie, bob))
    assert not policies.resolve("acme", "bob").rerank.enabled
    await policies.set_fields("acme", None, {"rerank.keep": 5})
    with pytest.raises(web.HTTPSeeOther) as cleared:
        await clear_layer(form(console_app, "/", {"csrf": csrf}, cookie, ACME))
    assert cleared.value.location.endswith("done=cleared")
    assert policies.resolve("acme").rerank.keep == 8


async def test_the_platform_page_is_read_only_and_every_page_needs_a_session(
        console_app: web.Application, signed_in: tuple[dict[str, str], str]) -> None:
    cookie, _ = signed_in
    page = await platform_page(request(console_app, "GET", PATH + "platform", headers=cookie))
    assert page.status == 200 and "compaction.trigger_ratio" in (page.text or "")
    with pytest.raises(web.HTTPSeeOther):
        await platform_page(request(console_app, "GET", PATH + "platform"))
    refused = await policy_save(form(console_app, "/", {"rerank.keep": "2"}, {}, ACME))
    assert refused.status == 403
