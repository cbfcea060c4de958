"""Deployment settings (SPEC section 9): the policies folder plus environment overrides.

``Settings`` holds what differs per deployment, resolved once at start-up; a bad value raises
``ConfigError`` naming the variable.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.errors import ConfigError
from proxy.policy.platform import AUTH_MODES, DEFAULT_UPSTREAM_URL, PlatformConfig, load_policies


def _env_bool(name: str, env: Mapping[str, str], default: bool = False) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"environment: {name}: expected true or false, got {value!r}")


def _env_number(name: str, env: Mapping[str, str], default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"environment: {name}: expected a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"environment: {name}: expected a positive number, got {raw!r}")
    return value


def _env_count(name: str, env: Mapping[str, str], default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"environment: {name}: expected a whole number of at least 1, "
                          f"got {raw!r}")
    return int(raw)


LOG_FORMATS = ("text", "json")
STORE_FILE = "context-proxy.db"
LEGACY_DB_PATH = Path(STORE_FILE)  # the default before the data folder: the working directory


def default_db_path(env: Mapping[str, str]) -> Path:
    """Where the SQLite file lives without ``CONTEXT_PROXY_DB``: the user's data folder
    (``$XDG_DATA_HOME/context-proxy/``, else ``~/.local/share/context-proxy/``), so every shell
    in every folder reaches the same store; never the working directory."""
    data_home = env.get("XDG_DATA_HOME", "").strip()
    # The XDG spec: a relative value is invalid and is ignored.
    if data_home and Path(data_home).is_absolute():
        base = Path(data_home)
    else:
        home = env.get("HOME", "").strip()
        base = (Path(home) if home else Path.home()) / ".local" / "share"
    return base / "context-proxy" / STORE_FILE

DATABASE_SCHEMES = ("postgresql", "postgres")


def check_database_url(raw: str | None) -> str | None:
    """``CONTEXT_PROXY_DATABASE_URL`` (unset or empty: None, the SQLite file). The error names
    the variable and the scheme, never the rest (it may hold a password)."""
    url = (raw or "").strip()
    if not url:
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in DATABASE_SCHEMES:
        shown = f"scheme {scheme.lower()[:20]!r}" if sep else "no scheme"
        raise ConfigError("environment: CONTEXT_PROXY_DATABASE_URL: expected a postgresql:// "
                          f"URL, got one with {shown}")
    return "postgresql://" + rest


def check_port(value: object, name: str) -> int:
    """``value`` as a TCP port (0 lets the OS pick), or ``ConfigError`` naming ``name``."""
    text = str(value).strip()
    if not text.isdigit() or not 0 <= int(text) < 65536:
        raise ConfigError(f"{name}: expected a port from 0 to 65535, got {text!r}")
    return int(text)


def check_host(value: str, name: str) -> str:
    """``value`` as a host to listen on: an IP address or a host name. Something shaped like an
    IPv4 address that is not one (``999.1.1.1``) is refused here, before a slow name lookup."""
    host = value.strip()
    if not host:
        raise ConfigError(f"{name}: expected an IP address or host name, got an empty value")
    if all(part.isdigit() for part in host.split(".")) or ":" in host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{name}: not an IP address: {host!r}") from None
    return host


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def check_trusted_proxies(raw: str | None) -> tuple[Network, ...]:
    """``CONTEXT_PROXY_TRUSTED_PROXIES``: comma-separated addresses or CIDRs of the front ends
    whose ``X-Forwarded-Proto``/``-For`` are believed (unset: none)."""
    found = []
    for part in (raw or "").split(","):
        text = part.strip()
        if not text:
            continue
        try:
            found.append(ipaddress.ip_network(text))
        except ValueError as e:
            raise ConfigError(f"environment: CONTEXT_PROXY_TRUSTED_PROXIES: not an IP address "
                              f"or CIDR: {text!r} ({e})") from None
    return tuple(found)


def _http_url(value: str, name: str) -> str:
    url = value.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"environment: {name}: not an http(s) URL: {url!r}")
    return url


@dataclass(frozen=True)
class Settings:
    """Everything the server needs to start, resolved from YAML and environment."""

    host: str = "127.0.0.1"
    port: int = 8080
    upstream_url: str = DEFAULT_UPSTREAM_URL
    upstream_api_key: str | None = None
    auth_mode: str = "proxy_keys"
    policies_dir: Path | None = None
    db_path: Path = Path(STORE_FILE)  # load_settings: CONTEXT_PROXY_DB, else the data folder
    db_path_default: bool = False  # db_path is the data folder's file (CONTEXT_PROXY_DB unset)
    database_url: str | None = None  # PostgreSQL instead of the file at db_path
    db_pool_size: int = 10
    admin_token: str | None = None
    manual_compaction: bool = False
    forward_conversation_id: bool = False  # X-Conversation-Id reaches the upstream (opt-in)
    serves_compaction_trigger: str = "auto"  # the upstream answers compaction_trigger itself
    responses_websocket: bool = True  # off: the upgrade is a 426, so clients use HTTP at once
    upstream_timeout_s: float = 600.0
    anthropic_url: str = "https://api.anthropic.com/v1"  # /v1/messages goes here
    anthropic_api_key: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    shutdown_grace_s: float = 8.0  # after SIGTERM, how long open requests may finish
    key_grace_s: float = 600.0  # store unreachable: keys validated this recently are served
    log_format: str = "text"
    trusted_proxies: tuple[Network, ...] = ()  # front ends whose X-Forwarded-* are believed
    platform: PlatformConfig = field(default_factory=PlatformConfig)

    @property
    def store_target(self) -> Path | str:
        """What ``Store`` opens: the PostgreSQL URL when one is set, else the SQLite file."""
        return self.database_url or self.db_path


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Resolve settings: platform YAML first, environment variables over it, then ``overrides``."""
    env = os.environ if env is None else env
    folder_raw = env.get("CONTEXT_PROXY_POLICIES")
    if folder_raw:
        folder: Path | None = Path(folder_raw)
        if not Path(folder_raw).is_dir():
            # A typo here would silently drop every lock and bound of the platform's policy.
            raise ConfigError(f"environment: CONTEXT_PROXY_POLICIES: not a folder: {folder_raw!r}")
    else:
        folder = Path("policies") if Path("policies").is_dir() else None
    platform = overrides.pop("platform", None) or load_policies(folder)
    mode = env.get("CONTEXT_PROXY_AUTH_MODE") or platform.auth_mode
    if mode not in AUTH_MODES:
        raise ConfigError(f"environment: CONTEXT_PROXY_AUTH_MODE: expected one of {AUTH_MODES}")
    log_format = env.get("CONTEXT_PROXY_LOG_FORMAT", "text").strip().lower() or "text"
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"environment: CONTEXT_PROXY_LOG_FORMAT: expected text or json, "
                          f"got {log_format!r}")
    url = (env.get("CONTEXT_PROXY_UPSTREAM_URL") or platform.upstream_url).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"environment: CONTEXT_PROXY_UPSTREAM_URL: not an http(s) URL: {url!r}")
    db_raw = env.get("CONTEXT_PROXY_DB", "").strip()
    values: dict[str, Any] = dict(
        host=check_host(env.get("CONTEXT_PROXY_HOST", "127.0.0.1"),
                        "environment: CONTEXT_PROXY_HOST"),
        port=check_port(env.get("CONTEXT_PROXY_PORT", "8080"), "environment: CONTEXT_PROXY_PORT"),
        upstream_url=url,
        upstream_api_key=env.get("CONTEXT_PROXY_UPSTREAM_API_KEY")
        or env.get(platform.api_key_env) or None,
        auth_mode=mode,
        policies_dir=folder,
        db_path=Path(db_raw) if db_raw else default_db_path(env),
        db_path_default=not db_raw,
        database_url=check_database_url(env.get("CONTEXT_PROXY_DATABASE_URL")),
        db_pool_size=_env_count("CONTEXT_PROXY_DB_POOL_SIZE", env, 10),
        admin_token=env.get("CONTEXT_PROXY_ADMIN_TOKEN") or None,
        manual_compaction=_env_bool("CONTEXT_PROXY_MANUAL_COMPACTION", env),
        forward_conversation_id=_env_bool("CONTEXT_PROXY_FORWARD_CONVERSATION_ID", env,
                                          default=platform.forward_conversation_id),
        serves_compaction_trigger=platform.serves_compaction_trigger,
        responses_websocket=_env_bool("CONTEXT_PROXY_RESPONSES_WEBSOCKET", env, default=True),
        upstream_timeout_s=_env_number("CONTEXT_PROXY_UPSTREAM_TIMEOUT_S", env, 600.0),
        anthropic_url=_http_url(env.get("CONTEXT_PROXY_ANTHROPIC_URL")
                                or "https://api.anthropic.com/v1",
                                "CONTEXT_PROXY_ANTHROPIC_URL"),
        anthropic_api_key=env.get("CONTEXT_PROXY_ANTHROPIC_API_KEY")
        or env.get("ANTHROPIC_API_KEY") or None,
        max_body_bytes=int(_env_number("CONTEXT_PROXY_MAX_BODY_BYTES", env, 32 * 1024 * 1024)),
        shutdown_grace_s=_env_number("CONTEXT_PROXY_SHUTDOWN_GRACE_S", env, 8.0),
        key_grace_s=_env_number("CONTEXT_PROXY_KEY_GRACE_S", env, 600.0),
        platform=platform,
        log_format=log_format,
        trusted_proxies=check_trusted_proxies(env.get("CONTEXT_PROXY_TRUSTED_PROXIES")),
    )
    values.update(overrides)
    return Settings(**values)
