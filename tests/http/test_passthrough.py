"""Every other /v1/* route is relayed unchanged: method, query, body, status, error bodies."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy.testing.harness import Harness


def test_models_and_embeddings_through_the_sdk(make_harness, sdk) -> None:
    from proxy.testing.fake_upstream import FakeUpstream

    h = make_harness(fake=FakeUpstream(models={"my-llama": 32768}))
    c = sdk(h, h.create_key())
    assert [m.id for m in c.models.list()] == ["my-llama"]
    emb = c.embeddings.create(model="e", input=["alpha beta", "gamma"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) == 64
    assert h.fake.requests[-1].json == {"model": "e", "input": ["alpha beta", "gamma"],
                                        "encoding_format": "base64"} or \
        h.fake.requests[-1].json["input"] == ["alpha beta", "gamma"]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("status", [200, 201, 400, 404, 500])
def test_method_body_query_status_are_relayed(harness: Harness, key: str, method: str,
                                              status: int) -> None:
    body = None if method in ("GET", "DELETE") else b'{"a": [1, 2, 3], "b": "\\u00fc"}'
    req = urllib.request.Request(
        f"{harness.base_url}/files/file-123/content?status={status}&x=1", data=body,
        method=method, headers={"Authorization": f"Bearer {key}",
                                "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            got_status, got = resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        got_status, got = e.code, json.loads(e.read())
    assert got_status == status
    assert got["method"] == method
    assert got["path"] == "/v1/files/file-123/content"
    assert got["query"] == f"status={status}&x=1"
    assert got["body_sha256"] == hashlib.sha256(body or b"").hexdigest()
    assert harness.fake.requests[-1].headers["Authorization"] == f"Bearer {harness.upstream_key}"


def test_large_upload_streams_through(harness: Harness, key: str) -> None:
    blob = bytes(range(256)) * 20_000  # 5 MB, over the whole-body threshold
    req = urllib.request.Request(f"{harness.base_url}/files", data=blob, method="POST",
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req) as resp:
        got = json.loads(resp.read())
    assert got["body_length"] == len(blob)
    assert got["body_sha256"] == hashlib.sha256(blob).hexdigest()


def test_other_routes_need_a_key(harness: Harness) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{harness.base_url}/models")
    assert info.value.code == 401
    info.value.close()
    assert harness.fake.requests == []


def test_health_ready_metrics(harness: Harness) -> None:
    root = harness.base_url.removesuffix("/v1")
    assert json.loads(urllib.request.urlopen(root + "/healthz").read()) == {"status": "ok"}
    assert json.loads(urllib.request.urlopen(root + "/readyz").read()) == {"status": "ready"}
    with urllib.request.urlopen(root + "/metrics") as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
