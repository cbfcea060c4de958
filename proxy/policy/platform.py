"""The platform YAML (SPEC section 7.1): ``policies/platform.yaml`` and YAML-managed organizations.

``PlatformConfig`` is the parsed policies folder, validated once at load with errors that name
the file and the key (``ConfigError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.errors import ConfigError
from proxy.policy.model import FIELDS, PolicyError, did_you_mean, flatten, validate_layer

DEFAULT_UPSTREAM_URL = "https://api.openai.com/v1"
AUTH_MODES = ("proxy_keys", "passthrough")
TRIGGER_MODES = ("auto", "true", "false")
_PLATFORM_KEYS = {"upstream", "auth", "fallback_window", "models", "defaults", "locks", "bounds",
                  "orgs"}

@dataclass(frozen=True)
class OrgSpec:
    """An organization declared in YAML: its policy layer and its users' layers (flat, valid)."""

    policy: Mapping[str, Any] = field(default_factory=dict)
    users: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlatformConfig:
    upstream_url: str = DEFAULT_UPSTREAM_URL
    api_key_env: str = "OPENAI_API_KEY"
    # Summary calls (only those) name the caller's organization to the upstream in an
    # X-Context-Proxy-Org header: off unless the platform opts in, since it tells the provider
    # who the proxy's customers are.
    send_org_header: bool = False
    # X-Conversation-Id is the proxy's: never forwarded unless the platform opts in (a provider
    # that keys its own caching or tracing on it).
    forward_conversation_id: bool = False
    # Whether the upstream answers the Responses ``compaction_trigger`` item itself: "auto"
    # (send it; an upstream that refuses it is remembered and the proxy answers), "true", "false"
    # (the proxy always answers it; proxy.http.inband.trigger).
    serves_compaction_trigger: str = "auto"
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
        # The file is named once, here: the policy's own messages say only the key at fault.
        return validate_layer(flatten(_mapping(nested, where, key), None))
    except PolicyError as e:
        raise ConfigError(f"{where}: '{key}.{e.key}': {e.message}") from None


def _bounds(raw: Any, where: str) -> dict[str, tuple[float | None, float | None]]:
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
        first = sorted(unknown)[0]
        raise ConfigError(f"{where}: unknown key '{first}'{did_you_mean(first, _PLATFORM_KEYS)}")
    upstream = _mapping(doc.get("upstream"), where, "upstream")
    if set(upstream) - {"base_url", "api_key_env", "send_org_header", "forward_conversation_id",
                        "serves_compaction_trigger"}:
        raise ConfigError(f"{where}: 'upstream': only 'base_url', 'api_key_env', "
                          "'send_org_header', 'forward_conversation_id' and "
                          "'serves_compaction_trigger' are allowed")
    serves = upstream.get("serves_compaction_trigger", "auto")
    serves = {True: "true", False: "false"}.get(serves, serves)
    if serves not in TRIGGER_MODES:
        raise ConfigError(f"{where}: 'upstream.serves_compaction_trigger': expected true, false "
                          f"or auto, got {serves!r}")
    send_org = _flag(upstream, "send_org_header", where)
    forward_id = _flag(upstream, "forward_conversation_id", where)
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
        send_org_header=send_org,
        forward_conversation_id=forward_id,
        serves_compaction_trigger=serves,
        auth_mode=mode,
        defaults=flat_defaults,
        locks=frozenset(locks),
        bounds=bounds,
        orgs=_orgs(doc.get("orgs"), where),
    )


def _flag(upstream: Mapping[str, Any], name: str, where: str) -> bool:
    value = upstream.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: 'upstream.{name}': expected true or false, got {value!r}")
    return value


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
