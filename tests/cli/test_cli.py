"""The ``context-proxy`` command (``proxy.cli``) in process, on the suite's store: keys issued
(the plaintext printed once), bound from standard input, listed without secrets and revoked;
dividers of a conversation; a bad setting ends with one ``error:`` line and exit status 2."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.context.identity import conversation_key
from proxy.context.records.compactions import Records
from proxy.store import Store


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        database_url: str | None) -> Callable[..., tuple[int, str, str]]:
    monkeypatch.setenv("CONTEXT_PROXY_DB", str(tmp_path / "proxy.db"))

    def go(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return go


def test_keys_are_issued_once_listed_without_secrets_and_revoked(run: Any) -> None:
    code, out, err = run("keys", "create", "--org", "acme", "--user", "alice")
    issued = json.loads(out)
    assert code == 0 and issued["key"].startswith("cp-") and "shown only once" in err
    assert err.startswith("store: ")
    code, out, _ = run("keys", "list")
    listed = json.loads(out)["data"]
    assert [(k["id"], k["org"], k["user"], k["revoked"]) for k in listed] == [
        (issued["id"], "acme", "alice", False)]
    assert issued["key"] not in out and "hash" not in out
    assert run("keys", "revoke", issued["id"])[:2] == (0, f"revoked {issued['id']}\n")
    code, _, err = run("keys", "revoke", issued["id"])
    assert code == 1 and "no active key" in err
    assert json.loads(run("keys", "list")[1])["data"][0]["revoked"] is True


def test_a_client_key_is_bound_from_standard_input(run: Any) -> None:
    code, out, _ = run("keys", "bind", "--org", "globex", stdin="sk-client-own\n")
    assert code == 0 and json.loads(out)["kind"] == "bound" and "sk-client-own" not in out
    code, _, err = run("keys", "bind", "--org", "globex", stdin="\n")
    assert code == 2 and "standard input" in err


def test_dividers_of_a_conversation(run: Any, tmp_path: Path,
                                    store_target: Callable[[str], Path | str]) -> None:
    code, _, err = run("dividers", "--org", "acme", "ticket-1")
    assert code == 1 and "has no conversation 'ticket-1'" in err
    store = Store(store_target("proxy.db"))
    try:
        store.atomic(lambda tx: tx.execute(
            "INSERT INTO conversations (id, org, created_at) VALUES (?, ?, ?)",
            [conversation_key("acme", "ticket-1"), "acme", 1.0]))
        assert Records(store).exists(conversation_key("acme", "ticket-1"))
    finally:
        store.close()
    code, out, _ = run("dividers", "--org", "acme", "ticket-1")
    assert code == 0 and json.loads(out) == {"object": "list", "conversation_id": "ticket-1",
                                             "data": []}


def test_a_bad_setting_is_one_error_line_and_status_2(
        run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXT_PROXY_AUTH_MODE", "nobody")
    code, out, err = run("keys", "list")
    assert (code, out) == (2, "") and err.startswith("error: environment: "
                                                     "CONTEXT_PROXY_AUTH_MODE")
    with pytest.raises(SystemExit) as info:
        main(["demo", "--turns", "0"])
    assert info.value.code == 2
