"""The admin API (SPEC section 7.1) through HTTP against a running proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.policy.model import FIELDS
from proxy.store import Store
from proxy.store.keys import hash_key
from proxy.testing.harness import Harness

TOKEN = "admin-secret-token-0123"
TRIGGER = "compaction.trigger_ratio"


class Admin:
    def __init__(self, h: Harness, token: str | None = TOKEN) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.h = h
        self.base = h.base_url.removesuffix("/v1")
        self.seen: list[str] = []  # every response body, to check nothing secret leaks

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        content = raw if raw is not None else (None if body is None else json.dumps(body))
        resp = httpx.request(method, self.base + path, content=content, timeout=30,
                             headers={**self.headers, **(headers or {})})
        self.seen.append(resp.text)
        return resp

    def view(self, org: str, user: str | None = None) -> dict[str, Any]:
        resp = self.call("GET", _path(org, user))
        assert resp.status_code == 200, resp.text
        return resp.json()["fields"]  # type: ignore[no-any-return]


def _path(org: str, user: str | None = None) -> str:
    return f"/admin/orgs/{org}/users/{user}/policy" if user else f"/admin/orgs/{org}/policy"


def folder(tmp_path: Path, platform: str, **others: str) -> Path:
    f = tmp_path / "policies"
    f.mkdir(exist_ok=True)
    (f / "platform.yaml").write_text(platform)
    for name, text in others.items():
        (f / f"{name}.yaml").write_text(text)
    return f


def start(make_harness: Callable[..., Harness], tmp_path: Path, platform: str = "",
          **others: str) -> Admin:
    env = {"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN,
           "CONTEXT_PROXY_POLICIES": str(folder(tmp_path, platform, **others))}
    return Admin(make_harness(env=env))


def assert_openai_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err  # type: ignore[no-any-return]


def stored_rows(h: Harness) -> list[tuple[str, str, str]]:
    rows = h.state.store.read('SELECT org, "user", fields FROM policy_layers ORDER BY 1, 2')
    return [tuple(r) for r in rows]


def test_admin_api_absent_without_token(harness: Harness) -> None:
    base = harness.base_url.removesuffix("/v1")
    for method, path in (("GET", "/admin/orgs"), ("GET", "/admin/orgs/acme/policy"),
                         ("PATCH", "/admin/orgs/acme/policy")):
        resp = httpx.request(method, base + path, headers={"Authorization": "Bearer x"})
        assert_openai_error(resp, 404)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": f"Bearer {TOKEN}x"}])
def test_admin_refuses_missing_or_wrong_token(make_harness, tmp_path: Path,
                                              headers: dict[str, str]) -> None:
    admin = start(make_harness, tmp_path)
    base = admin.h.base_url.removesuffix("/v1")
    for method, path, body in (("GET", "/admin/orgs", None), ("GET", _path("acme"), None),
                               ("PATCH", _path("acme"), {TRIGGER: 0.7}),
                               ("DELETE", _path("acme", "bob"), None)):
        resp = httpx.request(method, base + path, headers=headers,
                             content=None if body is None else json.dumps(body))
        assert_openai_error(resp, 401)
    assert stored_rows(admin.h) == []
    # a client key is not an admin token
    key = admin.h.create_key("acme")
    resp = httpx.get(base + "/admin/orgs", headers={"Authorization": f"Bearer {key}"})
    assert_openai_error(resp, 401)


def test_effective_view_shape_and_layering(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path)
    fields = admin.view("acme")  # no layer yet: the platform values
    assert set(fields) == set(FIELDS)
    assert fields[TRIGGER] == {"effective": 0.8, "platform": 0.8, "org": None, "user": None,
                               "locked": False, "clamped": False, "ignored": False}
    resp = admin.call("PATCH", _path("acme"), {TRIGGER: 0.7, "masking.keep_recent": 3})
    assert resp.status_code == 200, resp.text
    assert resp.json()["fields"][TRIGGER] == {"effective": 0.7, "platform": 0.8, "org": 0.7,
                                              "user": None, "locked": False, "clamped": False,
                                              "ignored": False}
    resp = admin.call("PATCH", _path("acme", "alice"), {TRIGGER: 0.6})
    assert resp.status_code == 200
    alice = admin.view("acme", "alice")
    assert (alice[TRIGGER]["effective"], alice[TRIGGER]["org"], alice[TRIGGER]["user"]) == (
        0.6, 0.7, 0.6)
    assert alice["masking.keep_recent"]["effective"] == 3
    policies = admin.h.state.policies
    assert policies.resolve("acme", "alice").compaction.trigger_ratio == 0.6
    assert policies.resolve("acme", "bob").compaction.trigger_ratio == 0.7
    assert policies.resolve("beta").compaction.trigger_ratio == 0.8
    # null unsets one field of a layer
    resp = admin.call("PATCH", _path("acme"), {"masking.keep_recent": None})
    assert resp.json()["fields"]["masking.keep_recent"]["org"] is None
    # DELETE: "use the platform default"
    resp = admin.call("DELETE", _path("acme"))
    assert resp.status_code == 200
    assert resp.json()["fields"][TRIGGER]["effective"] == 0.8
    assert admin.view("acme", "alice")[TRIGGER]["effective"] == 0.6  # the user layer stays
    admin.call("DELETE", _path("acme", "alice"))
    assert admin.view("acme", "alice")[TRIGGER]["effective"] == 0.8
    assert stored_rows(admin.h) == []
    assert policies.resolve("acme", "alice").compaction.trigger_ratio == 0.8


def test_out_of_bounds_value_is_clamped_but_stored(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path,
                  "bounds: {compaction.trigger_ratio: {min: 0.5, max: 0.95}}\n")
    resp = admin.call("PATCH", _path("acme"), {TRIGGER: 0.3})
    assert resp.status_code == 200
    assert resp.json()["fields"][TRIGGER] == {"effective": 0.5, "platform": 0.8, "org": 0.3,
                                              "user": None, "locked": False, "clamped": True,
                                              "ignored": False}
    assert stored_rows(admin.h)[0][2] == json.dumps({TRIGGER: 0.3})
    assert admin.h.state.policies.resolve("acme").compaction.trigger_ratio == 0.5


def test_locked_field_refused_and_pre_lock_value_ignored(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path)
    assert admin.call("PATCH", _path("acme"), {"masking.enabled": False}).status_code == 200
    assert admin.h.state.policies.resolve("acme").masking.enabled is False
    (tmp_path / "policies" / "platform.yaml").write_text("locks: [masking.enabled]\n")
    deadline = time.monotonic() + 3
    while not admin.view("acme")["masking.enabled"]["locked"]:
        assert time.monotonic() < deadline, "the lock was not reloaded within 3 s"
        time.sleep(0.05)
    assert admin.view("acme")["masking.enabled"] == {
        "effective": True, "platform": True, "org": False, "user": None, "locked": True,
        "clamped": False, "ignored": True}
    assert admin.h.state.policies.resolve("acme").masking.enabled is True
    before = stored_rows(admin.h)
    for path in (_path("acme"), _path("acme", "alice")):
        err = assert_openai_error(
            admin.call("PATCH", path, {TRIGGER: 0.7, "masking.enabled": False}), 409)
        assert "masking.enabled" in err["message"] and err["param"] == "masking.enabled"
    assert stored_rows(admin.h) == before  # nothing written, not even the valid field


def test_yaml_managed_org_refuses_api_writes(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path, "orgs: {acme: {policy: {compaction: "
                  "{trigger_ratio: 0.7}}}}\n",
                  teams="orgs: {beta: {users: {bob: {policy: {masking: {keep_recent: 2}}}}}}\n")
    fields = admin.view("acme")
    assert (fields[TRIGGER]["effective"], fields[TRIGGER]["org"]) == (0.7, 0.7)
    assert admin.view("beta", "bob")["masking.keep_recent"]["user"] == 2
    for method, path in (("PATCH", _path("acme")), ("DELETE", _path("acme")),
                         ("PATCH", _path("beta", "bob")), ("PATCH", _path("beta", "carol"))):
        err = assert_openai_error(admin.call(method, path, {TRIGGER: 0.75}), 409)
        assert "YAML" in err["message"]
    assert stored_rows(admin.h) == []
    orgs = {o["org"]: o for o in admin.call("GET", "/admin/orgs").json()["orgs"]}
    assert orgs["acme"]["managed_by"] == "yaml"
    assert orgs["beta"]["file"].endswith("teams.yaml")


@pytest.mark.parametrize("raw, param", [
    (b"{not json", None),
    (b"", None),
    (b"[1, 2]", None),
    (b'"compaction.trigger_ratio"', None),
    (b"{}", None),
    (b'{"compaction.trigger_ratio": 7}', TRIGGER),
    (b'{"compaction.trigger_ratio": "0.7"}', TRIGGER),
    (b'{"compaction.trigger_ratio": NaN}', None),
    (b'{"compaction.summary_timeout_s": Infinity}', None),
    (b'{"masking.keep_recent": true}', "masking.keep_recent"),
    (b'{"masking.exclude_tools": "grep"}', "masking.exclude_tools"),
    (b'{"compaction.trigger_ratio": 0.7, "compaction.bogus": 1}', "compaction.bogus"),
    (b'{"masking.keep_recent": 3, "masking.enabled": "no"}', "masking.enabled"),
    (b"\xff\xfe", None),
])
def test_bad_input_is_400_and_changes_nothing(make_harness, tmp_path: Path, raw: bytes,
                                              param: str | None) -> None:
    admin = start(make_harness, tmp_path)
    admin.call("PATCH", _path("acme"), {"masking.keep_recent": 4})
    before, view = stored_rows(admin.h), admin.view("acme")
    for path in (_path("acme"), _path("acme", "alice")):
        err = assert_openai_error(admin.call("PATCH", path, raw=raw), 400)
        assert err["type"] == "invalid_request_error"
        if param:
            assert err["param"] == param and param in err["message"]
    assert stored_rows(admin.h) == before and admin.view("acme") == view


def test_list_orgs_and_no_secret_in_any_admin_response(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path, "orgs: {yamlco: {policy: {}}}\n")
    keys = [admin.h.create_key("acme", "alice"), admin.h.create_key("acme"),
            admin.h.create_key("beta")]
    admin.call("PATCH", _path("gamma"), {TRIGGER: 0.7})
    admin.call("PATCH", _path("acme", "alice"), {TRIGGER: 0.6})
    resp = admin.call("GET", "/admin/orgs")
    assert resp.status_code == 200
    orgs = {o["org"]: o for o in resp.json()["orgs"]}
    assert list(orgs) == ["acme", "beta", "gamma", "yamlco"]
    assert (orgs["acme"]["keys"], orgs["acme"]["users"], orgs["acme"]["org_layer"]) == (
        2, ["alice"], False)
    assert (orgs["gamma"]["keys"], orgs["gamma"]["org_layer"]) == (0, True)
    for org in orgs:
        admin.view(org)
        admin.view(org, "alice")
    admin.call("DELETE", _path("gamma"))
    admin.call("GET", "/admin/orgs/acme/policy", headers={"Authorization": "Bearer nope"})
    text = "\n".join(admin.seen)
    for key in keys:
        assert key not in text and hash_key(key) not in text
    assert admin.h.upstream_key not in text and TOKEN not in text


def test_admin_view_sees_cli_style_writes_at_once(make_harness, tmp_path: Path) -> None:
    from proxy.policy.rows import write_layer

    admin = start(make_harness, tmp_path)
    admin.view("acme")
    other = Store(admin.h.state.settings.store_target)  # another process
    try:
        other.atomic(write_layer, "acme", None, {TRIGGER: 0.66})
    finally:
        other.close()
    assert admin.view("acme")[TRIGGER]["effective"] == 0.66


def test_bad_names_and_methods(make_harness, tmp_path: Path) -> None:
    admin = start(make_harness, tmp_path)
    assert_openai_error(admin.call("POST", _path("acme"), {TRIGGER: 0.7}), 405)
    assert_openai_error(admin.call("PATCH", "/admin/orgs/" + "x" * 201 + "/policy",
                                   {TRIGGER: 0.7}), 400)
    assert_openai_error(admin.call("GET", "/admin/orgs/acme/users/a%0Ab/policy"), 400)
    assert_openai_error(admin.call("GET", "/admin/nothing"), 404)
    assert stored_rows(admin.h) == []
