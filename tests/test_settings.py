"""Environment settings (``proxy.settings``): over the platform YAML; a bad value names the
variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.settings import load_settings


def test_environment_overrides_yaml(tmp_path: Path) -> None:
    (tmp_path / "platform.yaml").write_text(
        "upstream: {base_url: 'http://a.example/v1', api_key_env: MY_KEY}\n"
        "auth: {mode: proxy_keys}\n")
    s = load_settings({"CONTEXT_PROXY_POLICIES": str(tmp_path), "MY_KEY": "k1"})
    assert (s.upstream_url, s.upstream_api_key, s.auth_mode) == ("http://a.example/v1", "k1",
                                                                 "proxy_keys")
    s = load_settings({"CONTEXT_PROXY_POLICIES": str(tmp_path), "MY_KEY": "k1",
                       "CONTEXT_PROXY_UPSTREAM_URL": "http://b.example/v1/",
                       "CONTEXT_PROXY_UPSTREAM_API_KEY": "k2",
                       "CONTEXT_PROXY_AUTH_MODE": "passthrough", "CONTEXT_PROXY_PORT": "9000",
                       "CONTEXT_PROXY_MANUAL_COMPACTION": "true",
                       "CONTEXT_PROXY_UPSTREAM_TIMEOUT_S": "12.5"})
    assert (s.upstream_url, s.upstream_api_key, s.auth_mode, s.port) == (
        "http://b.example/v1", "k2", "passthrough", 9000)
    assert s.manual_compaction is True and s.upstream_timeout_s == 12.5


@pytest.mark.parametrize("env", [
    {"CONTEXT_PROXY_AUTH_MODE": "nobody"}, {"CONTEXT_PROXY_PORT": "http"},
    {"CONTEXT_PROXY_MANUAL_COMPACTION": "maybe"}, {"CONTEXT_PROXY_UPSTREAM_TIMEOUT_S": "-1"},
    {"CONTEXT_PROXY_UPSTREAM_URL": "localhost:8000"},
])
def test_bad_environment_names_the_variable(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert next(iter(env)) in str(info.value)


def test_trusted_proxies_are_addresses_or_networks() -> None:
    s = load_settings({"CONTEXT_PROXY_TRUSTED_PROXIES": " 10.0.0.1, 192.168.0.0/16,,::1 "})
    assert [str(n) for n in s.trusted_proxies] == ["10.0.0.1/32", "192.168.0.0/16", "::1/128"]
    assert load_settings({}).trusted_proxies == ()
    for bad in ("10.0.0.300", "example.com", "10.0.0.1/8"):
        with pytest.raises(ConfigError) as info:
            load_settings({"CONTEXT_PROXY_TRUSTED_PROXIES": bad})
        assert "CONTEXT_PROXY_TRUSTED_PROXIES" in str(info.value) and bad in str(info.value)


@pytest.mark.parametrize("url", ["mysql://u:pw-s3cret@db/x", "sqlite:///tmp/x.db", "db.example"])
def test_a_database_url_of_another_kind_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"CONTEXT_PROXY_DATABASE_URL": url})
    assert "CONTEXT_PROXY_DATABASE_URL" in str(info.value) and "pw-s3cret" not in str(info.value)


def test_database_settings() -> None:
    settings = load_settings({"CONTEXT_PROXY_DATABASE_URL": "postgres://u@db/x",
                              "CONTEXT_PROXY_DB_POOL_SIZE": "3"})
    assert (settings.store_target, settings.db_pool_size) == ("postgresql://u@db/x", 3)
    assert load_settings({"CONTEXT_PROXY_DATABASE_URL": "", "XDG_DATA_HOME": "/srv/d"}
                         ).store_target == Path("/srv/d/context-proxy/context-proxy.db")
    with pytest.raises(ConfigError, match="CONTEXT_PROXY_DB_POOL_SIZE"):
        load_settings({"CONTEXT_PROXY_DB_POOL_SIZE": "0"})
