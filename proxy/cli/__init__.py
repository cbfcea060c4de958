"""The ``context-proxy`` command line: serve, demo, keys, dividers, export, policy."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings

if TYPE_CHECKING:
    from proxy.store import Store


def _settings(args: argparse.Namespace) -> Settings:
    from proxy.settings import check_host, check_port

    overrides: dict[str, Any] = {}
    if getattr(args, "host", None) is not None:
        overrides["host"] = check_host(args.host, "--host")
    if getattr(args, "port", None) is not None:
        overrides["port"] = check_port(args.port, "--port")
    return load_settings(**overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    """Check every setting, bind the port, then build and run the application on it."""
    from proxy.cli import logs

    settings = _settings(args)
    handler = logs.configure_logging(settings.log_format)
    try:
        return _serve(settings)
    finally:
        handler.close()


def _serve(settings: Settings) -> int:
    from proxy.cli import startup

    startup.check_store(settings)
    sock = startup.listen(settings.host, settings.port)
    log = logging.getLogger("context_proxy")
    if settings.auth_mode == "proxy_keys" and not settings.upstream_api_key:
        log.warning("no upstream API key set (CONTEXT_PROXY_UPSTREAM_API_KEY or %s)",
                    settings.platform.api_key_env)
    from aiohttp import web

    from proxy.app import create_app
    from proxy.http.access import ACCESS_LOGGER, AccessLog
    from proxy.http.encoding import SERVER_OPTIONS

    app = create_app(settings)
    from proxy.cli import shutdown_log, upstream_check

    upstream_check.install(app, settings, startup.public_url(settings.upstream_url))
    shutdown_log.install(app)
    startup.tune_collector()
    startup.tune_allocator()
    startup.tune_switching()
    line = startup.startup_line(settings, sock)
    # run_app calls ``print`` once its sites are up: the moment to say where the proxy listens.
    web.run_app(app, sock=sock, access_log=logging.getLogger(ACCESS_LOGGER),
                access_log_class=AccessLog, print=lambda _: log.info("%s", line),
                shutdown_timeout=settings.shutdown_grace_s, handle_signals=True,
                **SERVER_OPTIONS)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from proxy.cli.demo import TURNS, run_demo

    return run_demo(turns=args.turns or TURNS, serve=args.serve, port=args.port)


def cmd_export(args: argparse.Namespace) -> int:
    from proxy.cli.export import run_cli

    return run_cli(args)


def cmd_recall_audit(args: argparse.Namespace) -> int:
    from proxy.cli.recall_audit import run_cli

    return run_cli(args)


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[Store]:
    """The store the settings name (announced on stderr), closed when the command is done."""
    from proxy.cli.startup import open_store

    store = open_store(load_settings(), announce=True)
    try:
        yield store
    finally:
        store.close()


def cmd_keys_create(args: argparse.Namespace) -> int:
    with _store(args) as store:
        rec, plaintext = store.keys.create(args.org, args.user)
    print(json.dumps({"id": rec.id, "org": rec.org, "user": rec.user, "key": plaintext}))
    print("Store this key now: it is shown only once.", file=sys.stderr)
    return 0


def cmd_keys_bind(args: argparse.Namespace) -> int:
    with _store(args) as store:
        plaintext = sys.stdin.readline().strip()
        if not plaintext:
            print("error: give the client's key on standard input", file=sys.stderr)
            return 2
        rec = store.keys.bind(plaintext, args.org, args.user)
    print(json.dumps({"id": rec.id, "org": rec.org, "user": rec.user, "kind": rec.kind}))
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """Every key as one JSON document (never a secret or a hash)."""
    with _store(args) as store:
        keys = [{"id": rec.id, "org": rec.org, "user": rec.user, "kind": rec.kind,
                 "created_at": rec.created_at, "revoked": rec.revoked_at is not None}
                for rec in store.keys.all()]
    print(json.dumps({"object": "list", "data": keys}, indent=2))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with _store(args) as store:
        revoked = store.keys.revoke(args.id)
    if revoked:
        print(f"revoked {args.id}")
        return 0
    print(f"error: no active key with id {args.id}", file=sys.stderr)
    return 1


def cmd_dividers(args: argparse.Namespace) -> int:
    """The conversation's dividers, as ``GET /v1/conversations/{id}/dividers`` answers them."""
    from proxy.context.identity import conversation_key
    from proxy.context.records.compactions import Records

    key = conversation_key(args.org, args.conversation)
    with _store(args) as store:
        records = Records(store)
        dividers = records.dividers(key) if records.exists(key) else None
    if dividers is None:
        print(f"error: organization {args.org!r} has no conversation {args.conversation!r}",
              file=sys.stderr)
        return 1
    print(json.dumps({"object": "list", "conversation_id": args.conversation,
                      "data": dividers}, indent=2))
    return 0


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    from proxy import __version__
    from proxy.cli.parser import Parser

    p = Parser(prog="context-proxy", description=DESCRIPTION,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"context-proxy {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="run the proxy",
                       description="Run the proxy (settings: CONTEXT_PROXY_* variables and the "
                       "policies folder, docs/configuration.md).")
    s.add_argument("--host", help="address to listen on (default: CONTEXT_PROXY_HOST, "
                   "else 127.0.0.1)")
    s.add_argument("--port", type=int, help="port to listen on (default: CONTEXT_PROXY_PORT, "
                   "else 8080; 0 lets the system pick)")
    s.set_defaults(fn=cmd_serve)
    d = sub.add_parser("demo", help="play a long agent session through the proxy, offline")
    d.add_argument("--turns", type=_positive, default=None,
                   help="turns of the session to play (default 120)")
    d.add_argument("--serve", action="store_true",
                   help="then keep the proxy and its fake upstream running for your own client")
    d.add_argument("--port", type=int, default=0,
                   help="with --serve: the proxy's port (default: one the OS picks)")
    d.set_defaults(fn=cmd_demo)
    from proxy.cli.recall_audit import add_arguments as add_recall_audit_arguments

    ra = sub.add_parser("recall-audit", help="recall@k of fused (BM25 + semantic) retrieval "
                        "against exact search, before enabling rerank")
    add_recall_audit_arguments(ra)
    ra.set_defaults(fn=cmd_recall_audit)
    k = sub.add_parser("keys", help="manage proxy API keys").add_subparsers(dest="keys_cmd",
                                                                           required=True)
    kc = k.add_parser("create", help="issue a key (printed once)")
    kc.add_argument("--org", required=True, help="the organization the key belongs to")
    kc.add_argument("--user", help="the user of that organization it belongs to (optional)")
    kc.set_defaults(fn=cmd_keys_create)
    kb = k.add_parser("bind", help="bind a passthrough client key (read from stdin) to an org")
    kb.add_argument("--org", required=True, help="the organization the client key belongs to")
    kb.add_argument("--user", help="the user of that organization it belongs to (optional)")
    kb.set_defaults(fn=cmd_keys_bind)
    k.add_parser("list", help="list keys (no secrets)").set_defaults(fn=cmd_keys_list)
    kr = k.add_parser("revoke", help="revoke a key by id")
    kr.add_argument("id", help="the key's id (from keys create or keys list)")
    kr.set_defaults(fn=cmd_keys_revoke)
    dv = sub.add_parser("dividers", help="a conversation's dividers (compaction records)")
    dv.add_argument("--org", required=True, help="the organization that owns it")
    dv.add_argument("conversation", help="the conversation id (X-Conversation-Id or fp-…)")
    dv.set_defaults(fn=cmd_dividers)
    from proxy.cli.export import add_arguments as add_export_arguments

    ex = sub.add_parser("export", help="copy organizations, conversations, dividers, summaries "
                        "and usage into a new SQLite file (for sqlite-utils and Datasette)",
                        description="Copy the store's organizations, users, conversations, "
                        "dividers, summaries (full-text searchable) and usage and money into a "
                        "new SQLite file, reading the store only. No key or key hash is "
                        "copied: keys appear as counts per organization and user.")
    add_export_arguments(ex)
    ex.set_defaults(fn=cmd_export)
    from proxy.cli.policy_commands import add_policy_commands

    add_policy_commands(sub)
    return p


DESCRIPTION = """An OpenAI-compatible proxy that keeps long conversations inside the model's
context window. Commands that read or write the store name it on stderr (store: ...); without
CONTEXT_PROXY_DB it is context-proxy/context-proxy.db in $XDG_DATA_HOME (~/.local/share).
Run `context-proxy COMMAND --help` for a command's options."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
