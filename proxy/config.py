"""Deployment settings: the platform YAML in the policies folder plus environment overrides.

``Settings`` holds what differs per deployment (SPEC section 9); ``PlatformConfig`` is the parsed
``policies/platform.yaml`` (SPEC section 7.1). Both are validated once, at load, with errors that
name the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.policy import PolicyError, flatten, validate_layer

DEFAULT_UPSTREAM_URL = "https://api.openai.com/v1"
AUTH_MODES = ("proxy_keys", "passthrough")
_PLATFORM_KEYS = {"upstream", "auth", "fallback_window", "models", "defaults", "locks", "bounds",
                  "orgs"}


class ConfigError(ValueError):
    """A configuration file or variable is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class OrgSpec:
    """An organization declared in YAML: its policy layer and its users' layers (flat, valid)."""

    policy: Mapping[str, Any] = field(default_factory=dict)
    users: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlatformConfig:
    upstream_url: str = DEFAULT_UPSTREAM_URL
    api_key_env: str = "OPENAI_API_KEY"
    auth_mode: str = "proxy_keys"
    defaults: Mapping[str, Any] = field(default_factory=dict)  # flat, validated platform layer
    locks: frozenset[str] = frozenset()
    bounds: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    orgs: Mapping[str, OrgSpec] = field(default_factory=dict)
    org_files: Mapping[str, str] = field(default_factory=dict)  # YAML org -> file declaring it


def _mapping(value: Any, where: str, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: '{key}' must be a mapping, got {type(value).__name__}")
    return value


def _layer(nested: Any, where: str, key: str) -> dict[str, Any]:
    try:
        return validate_layer(flatten(_mapping(nested, where, key), where), where)
    except PolicyError as e:
        raise ConfigError(f"{where}: '{key}.{e.key}': {e.message}") from None


def _bounds(raw: Any, where: str) -> dict[str, tuple[float | None, float | None]]:
    from proxy.policy import FIELDS

    out: dict[str, tuple[float | None, float | None]] = {}
    for name, spec in _mapping(raw, where, "bounds").items():
        fs = FIELDS.get(name)
        if fs is None or not fs.numeric:
            raise ConfigError(f"{where}: 'bounds.{name}': not a numeric policy field")
        spec = _mapping(spec, where, f"bounds.{name}")
        if set(spec) - {"min", "max"}:
            raise ConfigError(f"{where}: 'bounds.{name}': only 'min' and 'max' are allowed")
        lo, hi = spec.get("min"), spec.get("max")
        for v, k in ((lo, "min"), (hi, "max")):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise ConfigError(f"{where}: 'bounds.{name}.{k}': expected a number, got {v!r}")
        # A bound must itself be a valid value of its field, or clamping would create one.
        try:
            lo, hi = (None if v is None else fs.check(f"bounds.{name}.{k}", v)
                      for v, k in ((lo, "min"), (hi, "max")))
        except PolicyError as e:
            raise ConfigError(f"{where}: '{e.key}': {e.message}") from None
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"{where}: 'bounds.{name}': min {lo} is above max {hi}")
        out[name] = (lo, hi)
    return out


def _orgs(raw: Any, where: str) -> dict[str, OrgSpec]:
    orgs: dict[str, OrgSpec] = {}
    for org, spec in _mapping(raw, where, "orgs").items():
        spec = _mapping(spec, where, f"orgs.{org}")
        if set(spec) - {"policy", "users"}:
            raise ConfigError(f"{where}: 'orgs.{org}': only 'policy' and 'users' are allowed")
        users = {
            str(u): _layer(_mapping(us, where, f"orgs.{org}.users.{u}").get("policy"), where,
                           f"orgs.{org}.users.{u}.policy")
            for u, us in _mapping(spec.get("users"), where, f"orgs.{org}.users").items()
        }
        orgs[str(org)] = OrgSpec(_layer(spec.get("policy"), where, f"orgs.{org}.policy"), users)
    return orgs


def parse_platform(doc: Any, where: str) -> PlatformConfig:
    """Validate a parsed platform YAML document; raise ``ConfigError`` naming file and key."""
    doc = _mapping(doc, where, "(top level)")
    unknown = set(doc) - _PLATFORM_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key '{sorted(unknown)[0]}'")
    upstream = _mapping(doc.get("upstream"), where, "upstream")
    if set(upstream) - {"base_url", "api_key_env"}:
        raise ConfigError(f"{where}: 'upstream': only 'base_url' and 'api_key_env' are allowed")
    auth = _mapping(doc.get("auth"), where, "auth")
    if set(auth) - {"mode"}:
        raise ConfigError(f"{where}: 'auth': only 'mode' is allowed")
    mode = auth.get("mode", "proxy_keys")
    if mode not in AUTH_MODES:
        raise ConfigError(f"{where}: 'auth.mode': expected one of {AUTH_MODES}, got {mode!r}")
    defaults = dict(_mapping(doc.get("defaults"), where, "defaults"))
    for top in ("models", "fallback_window"):
        if top in doc:
            defaults[top] = doc[top]
    locks = doc.get("locks") or []
    from proxy.policy import FIELDS

    if not isinstance(locks, list) or not all(isinstance(x, str) for x in locks):
        raise ConfigError(f"{where}: 'locks': expected a list of dotted field names")
    for name in locks:
        if name not in FIELDS:
            raise ConfigError(f"{where}: 'locks': unknown policy field '{name}'")
    url = upstream.get("base_url", DEFAULT_UPSTREAM_URL)
    key_env = upstream.get("api_key_env", "OPENAI_API_KEY")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: 'upstream.base_url': expected an http(s) URL, got {url!r}")
    if not isinstance(key_env, str) or not key_env:
        raise ConfigError(f"{where}: 'upstream.api_key_env': expected a variable name")
    flat_defaults, bounds = _layer(defaults, where, "defaults"), _bounds(doc.get("bounds"), where)
    for name, (lo, hi) in bounds.items():  # the platform's own value must respect its bounds
        value = flat_defaults.get(name, FIELDS[name].default)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{where}: 'defaults.{name}': {value!r} is outside its bounds "
                              f"[{lo}, {hi}]")
    return PlatformConfig(
        upstream_url=url.rstrip("/"),
        api_key_env=key_env,
        auth_mode=mode,
        defaults=flat_defaults,
        locks=frozenset(locks),
        bounds=bounds,
        orgs=_orgs(doc.get("orgs"), where),
    )


def load_platform(folder: Path | None) -> PlatformConfig:
    """Load ``platform.yaml`` from ``folder``; the embedded defaults when there is none."""
    if folder is None:
        return PlatformConfig()
    path = folder / "platform.yaml"
    if not path.exists():
        return PlatformConfig()
    return parse_platform(_read_yaml(path), str(path))


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        # One line (it goes to the log): where the parser stopped and why.
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{at}: {why}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read: {e}") from None


def load_policies(folder: Path | None) -> PlatformConfig:
    """Load the whole policies folder: ``platform.yaml`` plus the top-level ``orgs:`` of every
    other ``*.yaml`` file there (YAML-managed organizations), merged.

    Raises ``ConfigError`` naming the file and key at fault; an organization declared in two files
    is an error naming both. ``org_files`` of the result maps each YAML organization to its file.
    """
    cfg = load_platform(folder)
    if folder is None or not folder.is_dir():
        return cfg
    platform_file = str(folder / "platform.yaml")
    orgs, files = dict(cfg.orgs), dict.fromkeys(cfg.orgs, platform_file)
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "platform.yaml":
            continue
        doc = _mapping(_read_yaml(path), str(path), "(top level)")
        extra = set(doc) - {"orgs"}
        if extra:
            raise ConfigError(f"{path}: unknown key '{sorted(extra)[0]}' (only 'orgs' is allowed "
                              "outside platform.yaml)")
        for org, spec in _orgs(doc.get("orgs"), str(path)).items():
            if org in orgs:
                raise ConfigError(f"{path}: 'orgs.{org}': organization already declared in "
                                  f"{files[org]}")
            orgs[org], files[org] = spec, str(path)
    return replace(cfg, orgs=orgs, org_files=files)


def _env_bool(name: str, env: Mapping[str, str]) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
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


@dataclass(frozen=True)
class Settings:
    """Everything the server needs to start, resolved from YAML and environment."""

    host: str = "127.0.0.1"
    port: int = 8080
    upstream_url: str = DEFAULT_UPSTREAM_URL
    upstream_api_key: str | None = None
    auth_mode: str = "proxy_keys"
    policies_dir: Path | None = None
    db_path: Path = Path("context-proxy.db")
    admin_token: str | None = None
    manual_compaction: bool = False
    upstream_timeout_s: float = 600.0
    max_body_bytes: int = 32 * 1024 * 1024
    platform: PlatformConfig = field(default_factory=PlatformConfig)


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Resolve settings: platform YAML first, environment variables over it, then ``overrides``."""
    env = os.environ if env is None else env
    folder_raw = env.get("CONTEXT_PROXY_POLICIES")
    folder = Path(folder_raw) if folder_raw else (Path("policies") if Path("policies").is_dir()
                                                  else None)
    platform = overrides.pop("platform", None) or load_policies(folder)
    mode = env.get("CONTEXT_PROXY_AUTH_MODE") or platform.auth_mode
    if mode not in AUTH_MODES:
        raise ConfigError(f"environment: CONTEXT_PROXY_AUTH_MODE: expected one of {AUTH_MODES}")
    port_raw = env.get("CONTEXT_PROXY_PORT", "8080")
    if not port_raw.isdigit() or not 0 <= int(port_raw) < 65536:
        raise ConfigError(f"environment: CONTEXT_PROXY_PORT: expected a port, got {port_raw!r}")
    url = (env.get("CONTEXT_PROXY_UPSTREAM_URL") or platform.upstream_url).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"environment: CONTEXT_PROXY_UPSTREAM_URL: not an http(s) URL: {url!r}")
    values: dict[str, Any] = dict(
        host=env.get("CONTEXT_PROXY_HOST", "127.0.0.1"),
        port=int(port_raw),
        upstream_url=url,
        upstream_api_key=env.get("CONTEXT_PROXY_UPSTREAM_API_KEY")
        or env.get(platform.api_key_env) or None,
        auth_mode=mode,
        policies_dir=folder,
        db_path=Path(env.get("CONTEXT_PROXY_DB", "context-proxy.db")),
        admin_token=env.get("CONTEXT_PROXY_ADMIN_TOKEN") or None,
        manual_compaction=_env_bool("CONTEXT_PROXY_MANUAL_COMPACTION", env),
        upstream_timeout_s=_env_number("CONTEXT_PROXY_UPSTREAM_TIMEOUT_S", env, 600.0),
        max_body_bytes=int(_env_number("CONTEXT_PROXY_MAX_BODY_BYTES", env, 32 * 1024 * 1024)),
        platform=platform,
    )
    values.update(overrides)
    return Settings(**values)
