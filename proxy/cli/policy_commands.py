"""``context-proxy policy show|set|clear|validate``: the CLI side of the policy layers.

It applies the admin API's rules (``proxy.policy.layers.check_write``: unknown field, wrong value,
locked field, YAML-managed organization) and writes the same store rows; a running server picks
the change up within a second (``proxy.policy.watch``). Exit status: 0 done, 1 refused or
invalid (the message on stderr names the field, or the file and key).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from proxy.errors import ConfigError
from proxy.policy.layers import (
    LayerWriteError,
    check_clear,
    check_write,
    field_states,
    pick_layers,
    view_json,
)
from proxy.policy.platform import load_policies
from proxy.policy.rows import clear_layer, load_layers, write_layer
from proxy.settings import Settings, load_settings

T = TypeVar("T")


def _in_store(settings: Settings, write: bool, fn: Callable[..., T], *args: Any) -> T:
    """``fn(tx, *args)`` in a write (or read) transaction of the store the settings name,
    created and migrated when needed."""
    from proxy.cli.startup import open_store

    store = open_store(settings, announce=True)
    try:
        return store.atomic(fn, *args) if write else store.snapshot(fn, *args)
    finally:
        store.close()


def _print_view(settings: Settings, org: str, user: str | None) -> None:
    stored = _in_store(settings, False, load_layers, org, user)
    org_layer, user_layer = pick_layers(settings.platform, stored, org, user)
    view = {"org": org, "user": user,
            "managed_by": "yaml" if org in settings.platform.orgs else "api",
            "fields": view_json(field_states(settings.platform, org_layer, user_layer))}
    print(json.dumps(view, indent=2))


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def cmd_show(args: argparse.Namespace) -> int:
    _print_view(load_settings(), args.org, args.user)
    return 0


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs; each value is read as YAML (``0.7``, ``true``, ``[a, b]``,
    ``null`` to unset the field)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"expected FIELD=VALUE, got {item!r}")
        try:
            out[name.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ValueError(f"{name}: value is not valid YAML: {e}") from None
    return out


def cmd_set(args: argparse.Namespace) -> int:
    settings = load_settings()
    try:
        patch = check_write(settings.platform, args.org, args.user,
                            parse_assignments(args.assignments))
    except ValueError as e:
        return _fail(str(e))
    except LayerWriteError as e:
        return _fail(e.message)
    _in_store(settings, True, write_layer, args.org, args.user, patch)
    _print_view(settings, args.org, args.user)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    settings = load_settings()
    try:
        check_clear(settings.platform, args.org, args.user)
    except LayerWriteError as e:
        return _fail(e.message)
    _in_store(settings, True, clear_layer, args.org, args.user)
    _print_view(settings, args.org, args.user)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    folder = Path(args.folder or os.environ.get("CONTEXT_PROXY_POLICIES") or "policies")
    if not folder.is_dir():
        return _fail(f"{folder}: not a folder")
    try:
        cfg = load_policies(folder)
    except ConfigError as e:
        return _fail(str(e))
    files = sorted(p.name for p in folder.glob("*.yaml"))
    print(f"ok: {folder}: {len(files)} file(s) ({', '.join(files) or 'none'}), "
          f"{len(cfg.orgs)} YAML organization(s), {len(cfg.locks)} lock(s), "
          f"{len(cfg.bounds)} bound(s)")
    return 0


def add_policy_commands(sub: Any) -> None:
    """Add ``policy`` and its subcommands to the top-level subparsers ``sub``."""
    pol = sub.add_parser("policy", help="show, set, clear or validate policies",
                         description="Show, set, clear or validate policies: the admin API's "
                         "rules, on the store the settings name.")
    cmds = pol.add_subparsers(dest="policy_cmd", required=True)

    def target(p: argparse.ArgumentParser) -> None:
        p.add_argument("--org", required=True, help="the organization whose layer it is")
        p.add_argument("--user", help="a user of the organization (default: the org layer)")

    show = cmds.add_parser("show", help="print the effective view (JSON)")
    target(show)
    show.set_defaults(fn=cmd_show)
    st = cmds.add_parser("set", help="set fields of an org or user layer: FIELD=VALUE ...")
    target(st)
    st.add_argument("assignments", nargs="+", metavar="FIELD=VALUE",
                    help="dotted policy fields and their values, e.g. compaction.trigger_ratio=0.7")
    st.set_defaults(fn=cmd_set)
    cl = cmds.add_parser("clear", help="clear an org or user layer (use the platform default)")
    target(cl)
    cl.set_defaults(fn=cmd_clear)
    va = cmds.add_parser("validate", help="validate a policies folder (exit 1 when broken)")
    va.add_argument("folder", nargs="?", help="default: $CONTEXT_PROXY_POLICIES or ./policies")
    va.set_defaults(fn=cmd_validate)
