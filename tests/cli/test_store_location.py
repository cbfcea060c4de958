"""Without ``CONTEXT_PROXY_DB`` the store is one file in the user's data folder, whatever the
working directory: every command names it on stderr, and a store at the older default
(``./context-proxy.db``) is moved there once, with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from test_startup import HANG_GUARD_S, ROOT, Served, upstream  # noqa: F401  (a fixture)

from proxy.settings import default_db_path, load_settings


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``context-proxy args`` run from ``cwd`` (the package found through PYTHONPATH)."""
    full = {k: v for k, v in os.environ.items() if k != "CONTEXT_PROXY_DB"}
    full.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT), **env})
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=HANG_GUARD_S, env=full, check=False)


# The SQLite file's location: the PostgreSQL run, which has no file, leaves these tests out.
pytestmark = pytest.mark.own_store


def test_default_path_is_the_data_folder(tmp_path: Path) -> None:
    assert default_db_path({"XDG_DATA_HOME": str(tmp_path)}) == \
        tmp_path / "context-proxy" / "context-proxy.db"
    # No XDG_DATA_HOME, or a relative one (invalid by the XDG spec): ~/.local/share.
    for env in ({"HOME": str(tmp_path)}, {"HOME": str(tmp_path), "XDG_DATA_HOME": "rel"}):
        assert default_db_path(env) == tmp_path / ".local/share/context-proxy/context-proxy.db"
    settings = load_settings({"XDG_DATA_HOME": str(tmp_path)})
    assert settings.db_path_default and settings.db_path.parent == tmp_path / "context-proxy"
    explicit = load_settings({"XDG_DATA_HOME": str(tmp_path), "CONTEXT_PROXY_DB": "x.db"})
    assert explicit.db_path == Path("x.db") and not explicit.db_path_default


def test_every_folder_reaches_one_store(tmp_path: Path, data_home: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    made = cli(["keys", "create", "--org", "acme"], first, {})
    assert made.returncode == 0, made.stderr
    store = data_home / "context-proxy" / "context-proxy.db"
    assert f"store: {store}" in made.stderr.splitlines()
    listed = cli(["keys", "list"], second, {})
    assert [k["id"] for k in json.loads(listed.stdout)["data"]] == [json.loads(made.stdout)["id"]]
    assert listed.stderr.strip() == f"store: {store}"
    shown = cli(["policy", "show", "--org", "acme"], second, {})
    assert shown.returncode == 0 and f"store: {store}" in shown.stderr
    assert not list(first.iterdir()) and not list(second.iterdir())  # nothing in either folder


def test_a_store_at_the_older_default_is_moved_once(tmp_path: Path, data_home: Path) -> None:
    # What the older default made: the file in the working directory.
    old = cli(["keys", "create", "--org", "acme"], tmp_path,
              {"CONTEXT_PROXY_DB": "context-proxy.db"})
    assert old.returncode == 0, old.stderr
    legacy = tmp_path / "context-proxy.db"
    assert legacy.is_file()
    moved = cli(["keys", "list"], tmp_path, {})
    store = data_home / "context-proxy" / "context-proxy.db"
    lines = moved.stderr.strip().splitlines()
    assert lines == [f"store: moved the store at {legacy} (the older default) to {store}",
                     f"store: {store}"]
    assert len(json.loads(moved.stdout)["data"]) == 1
    assert store.is_file() and not legacy.exists()
    assert cli(["keys", "list"], tmp_path, {}).stderr.strip() == f"store: {store}"


def test_key_made_in_another_folder_serves(tmp_path: Path, upstream: str,  # noqa: F811
                                           data_home: Path) -> None:
    env = {"CONTEXT_PROXY_UPSTREAM_URL": upstream, "XDG_DATA_HOME": str(data_home),
           "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-location-1"}
    saved = os.environ.pop("CONTEXT_PROXY_DB", None)
    try:
        served = Served(env, tmp_path / "serve.log")
    finally:
        if saved is not None:
            os.environ["CONTEXT_PROXY_DB"] = saved
    try:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        key = json.loads(cli(["keys", "create", "--org", "acme"], elsewhere, env).stdout)["key"]
        with openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key=key,
                           max_retries=0) as client:
            reply = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
        assert reply.choices[0].message.content
    finally:
        text = served.stop()
    assert f"store sqlite {data_home / 'context-proxy' / 'context-proxy.db'};" in text
