"""Keys: hashed at rest, revocation at once (even from another process), secrets never leak."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from proxy.store import Store
from proxy.store.keys import hash_key
from proxy.testing.fake_upstream import FakeUpstream, Fault
from proxy.testing.harness import Harness

MSG = [{"role": "user", "content": "hi"}]


def cli(db: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CONTEXT_PROXY_DB=str(db))
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def test_database_holds_no_plaintext_key(tmp_path: Path,
                                        store_target: Callable[[str], Path | str]) -> None:
    db = tmp_path / "k.db"
    out = cli(db, "keys", "create", "--org", "acme", "--user", "alice")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    key = created["key"]
    assert (created["org"], created["user"]) == ("acme", "alice")
    store = Store(store_target("k.db"))
    try:
        rows = [tuple(r) for r in store.read("SELECT * FROM keys")]
    finally:
        store.close()
    assert [r for r in rows if hash_key(key) in r] and key not in str(rows)
    if store.kind == "sqlite":  # nor in the file's free pages or its write-ahead log
        raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("k.db"))
        assert key.encode() not in raw
    listing = cli(db, "keys", "list")
    assert key not in listing.stdout and hash_key(key) not in listing.stdout
    assert json.loads(listing.stdout)["data"][0]["id"] == created["id"]  # one JSON document


def test_revoked_key_is_refused_at_once_even_from_another_process(harness: Harness, sdk) -> None:
    assert harness.settings is not None
    out = cli(harness.settings.db_path, "keys", "create", "--org", "acme")
    created = json.loads(out.stdout)
    c = sdk(harness, created["key"])
    c.chat.completions.create(model="gpt-4o", messages=MSG)
    revoked = cli(harness.settings.db_path, "keys", "revoke", created["id"])
    assert revoked.returncode == 0, revoked.stderr
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="gpt-4o", messages=MSG)
    assert cli(harness.settings.db_path, "keys", "revoke", created["id"]).returncode == 1


def test_upstream_key_never_reaches_client_logs_or_metrics(
        make_harness, caplog: pytest.LogCaptureFixture, sdk) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeUpstream()
    h = make_harness(fake=fake)
    secret = h.upstream_key
    fake.faults += [Fault(status=401, body={"error": {"message": f"bad key {secret}"}}),
                    Fault(drop=True), Fault(status=500)]
    seen: list[str] = []
    c = sdk(h, h.create_key())
    for _ in range(4):
        try:
            raw = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG)
            seen += [raw.text, json.dumps(dict(raw.headers))]
        except openai.APIStatusError as e:
            seen += [e.message, json.dumps(e.body), json.dumps(dict(e.response.headers))]
    stream = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG,
                                                         stream=True)
    seen += [stream.http_response.read().decode(), json.dumps(dict(stream.headers))]
    seen.append(urllib.request.urlopen(h.base_url.replace("/v1", "/metrics")).read().decode())
    seen.append(caplog.text)
    assert len(seen) >= 10
    for text in seen:
        assert secret not in text


def test_passthrough_forwards_client_key_and_binds_org(make_harness, tmp_path: Path, sdk) -> None:
    h = make_harness(auth_mode="passthrough")
    c = sdk(h, "sk-client-own-key")
    c.chat.completions.create(model="gpt-4o", messages=MSG)
    assert h.fake.requests[-1].headers["Authorization"] == "Bearer sk-client-own-key"
    assert h.state.auth.authenticate  # a binding picks the organization
    h.state.store.keys.bind("sk-client-own-key", "globex")
    digest = hash_key("sk-client-own-key")
    principal = h.state.auth._resolve(h.state.store.keys.find(digest), "sk-client-own-key",
                                      digest)
    assert principal is not None and principal.org == "globex"


def test_bound_passthrough_key_is_not_a_proxy_key(
        store_target: Callable[[str], Path | str]) -> None:
    from proxy.auth import Authenticator

    store = Store(store_target("s.db"))
    store.keys.bind("sk-client", "acme")
    auth = Authenticator(store, "proxy_keys", "sk-up")
    digest = hash_key("sk-client")
    assert auth._resolve(store.keys.find(digest), "sk-client", digest) is None
    store.close()
