"""Hostile bodies on every managed API: a content-block ``type`` or a message ``role`` of the
wrong type, values nested deeper than Python recurses but within what the JSON parser takes,
and a body that does not decode under its ``Content-Encoding`` (or names a coding the proxy does
not take). Each is a 4xx in the API's own shape, never a 5xx, and never a traceback in the log.
A body that does decode is served, and the relay passes a compressed upload through as it
came."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import requests

from proxy.testing.harness import Harness

ROUTES = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
DEEP = "\u0000DEEP"  # stands for a nested value until the body is written


def body_for(api: str, content: Any) -> dict[str, Any]:
    if api == "messages":
        return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}
    if api == "responses":
        return {"model": "m", "input": [{"role": "user", "content": content}]}
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def encoded(body: dict[str, Any], depth: int) -> bytes:
    nested = b"[" * depth + b"]" * depth
    return json.dumps(body).encode().replace(json.dumps(DEEP).encode(), nested)


def cases(api: str) -> list[tuple[str, bytes, dict[str, str]]]:
    out = [(f"type {t!r}", json.dumps(body_for(api, [{"type": t, "text": "x"}])).encode(), {})
           for t in (["text"], {"a": 1}, 5, None)]
    for role in (["user"], {"a": 1}, 5):
        wrong = body_for(api, "hi")
        wrong["messages" if api != "responses" else "input"][0]["role"] = role
        out.append((f"role {role!r}", json.dumps(wrong).encode(), {}))
    for depth in (990, 1000, 1020):
        out.append((f"block {depth} deep", encoded(body_for(
            api, [{"type": "text", "text": "x", "extra": DEEP}]), depth), {}))
        out.append((f"content {depth} deep", encoded(body_for(api, DEEP), depth), {}))
    if api == "messages":
        call = {"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                               "input": {"a": DEEP}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": "x"}]}]}
        out.append(("tool_use input deep", encoded(call, 1000), {}))
    if api == "responses":
        call = {"model": "m", "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": DEEP}},
            {"type": "function_call_output", "call_id": "c", "output": "x"}]}
        out.append(("arguments deep", encoded(call, 1000), {}))
    out += [(f"bad {enc}", b"not compressed at all", {"Content-Encoding": enc})
            for enc in ("gzip", "deflate")]
    raw = json.dumps(body_for(api, "hi")).encode()
    out += [("gzip cut short", gzip.compress(raw)[:20], {"Content-Encoding": "gzip"}),
            ("deflate cut short", zlib.compress(raw)[:-4], {"Content-Encoding": "deflate"})]
    out += [(f"coding {enc}", raw, {"Content-Encoding": enc})
            for enc in ("br", "zstd", "compress", "gzip, gzip")]
    return out


@pytest.mark.parametrize("api", list(ROUTES))
def test_hostile_bodies_are_4xx_in_the_apis_shape(
        make_harness: Callable[..., Harness], api: str, caplog: pytest.LogCaptureFixture) -> None:
    h = make_harness()
    key = h.create_key("acme")
    caplog.set_level(logging.WARNING)
    for name, data, extra in cases(api):
        resp = requests.post(h.base_url + ROUTES[api], data=data, timeout=30, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json", **extra})
        assert resp.status_code < 500, (name, resp.status_code, resp.text[:300])
        if resp.status_code >= 400:
            shape = resp.json()
            if api == "messages":
                assert shape["type"] == "error", name
            else:
                assert set(shape["error"]) >= {"message", "type", "code"}, name
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


@pytest.mark.parametrize("api", list(ROUTES))
def test_a_compressed_body_that_decodes_is_served_and_sent_on_decoded(
        make_harness: Callable[..., Harness], api: str) -> None:
    h = make_harness()
    key = h.create_key("acme")
    raw = json.dumps(body_for(api, "hi")).encode()
    bare = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # deflate without its zlib header
    for coding, data in (("gzip", gzip.compress(raw)), ("deflate", zlib.compress(raw)),
                         ("deflate", bare.compress(raw) + bare.flush())):
        resp = requests.post(h.base_url + ROUTES[api], data=data, timeout=30, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json",
            "Content-Encoding": coding})
        assert resp.status_code == 200, (coding, resp.text[:300])
        sent = h.fake.requests[-1]
        assert "Content-Encoding" not in sent.headers and sent.json["model"] == "m"


def test_the_relay_passes_a_compressed_upload_through_as_it_came(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness()
    key = h.create_key("acme")
    raw = json.dumps({"input": "x" * 5000, "model": "e"}).encode()
    resp = requests.post(h.base_url + "/files", data=gzip.compress(raw), timeout=30, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json",
        "Content-Encoding": "gzip"})
    assert resp.status_code == 200, resp.text[:300]
    sent = h.fake.requests[-1]  # the fake's server decoded what it got: the client's bytes
    assert sent.headers.get("Content-Encoding") == "gzip" and sent.body == raw
