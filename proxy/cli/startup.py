"""What ``serve`` does before the application starts: every setting it depends on is checked
here, before anything slow, so a bad one ends the process with one line naming it.

The listening socket is bound here too: a port in use is found before the application is built,
and aiohttp then serves on that very socket.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from proxy.errors import ConfigError
from proxy.settings import LEGACY_DB_PATH, Settings
from proxy.store import Store

HOST_SETTING = "CONTEXT_PROXY_HOST / --host"
PORT_SETTING = "CONTEXT_PROXY_PORT / --port"


def open_store(settings: Settings, announce: bool = False) -> Store:
    """The store the settings name, migrated; ``ConfigError`` naming ``CONTEXT_PROXY_DB`` (a file
    that cannot be opened or written) or ``CONTEXT_PROXY_DATABASE_URL`` (a server that cannot be
    reached), without the URL's password. ``announce`` (the CLI's commands): one line
    ``store: <file or URL>`` on stderr once it is open, so a person sees which store a command
    used."""
    store = _open(settings, announce)
    if announce:
        print(f"store: {store_name(settings)}", file=sys.stderr)
    return store


def _open(settings: Settings, announce: bool) -> Store:
    if settings.database_url is None:
        from proxy.store import sqlite

        try:
            if settings.db_path_default:
                _tell(prepare_data_folder(settings.db_path), announce)
            return Store(settings.db_path)
        except sqlite.OPEN_ERRORS as e:
            raise ConfigError(f"CONTEXT_PROXY_DB: cannot open the store at "
                              f"{str(settings.db_path)!r}: {e}") from None
    from proxy.store import postgres

    url = settings.database_url
    try:
        return Store(url, settings.db_pool_size)
    except postgres.OPEN_ERRORS as e:
        reason = postgres.scrub(" ".join(str(e).split()), url)
        raise ConfigError(f"CONTEXT_PROXY_DATABASE_URL: cannot open the store at "
                          f"{postgres.public_url(url)}: {reason}") from None


SQLITE_SIDE_FILES = ("-wal", "-shm")


def prepare_data_folder(db_path: Path, legacy: Path = LEGACY_DB_PATH) -> str | None:
    """Make the data folder ``db_path`` lives in, and move a store left at the older default
    (``./context-proxy.db`` in the working directory) there when the data folder has none yet:
    its keys and conversations are kept. When both exist the data folder's is used. Returns the
    one line to tell about it (None: nothing to tell); ``OSError`` when the folder cannot be
    made or the file moved."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if not legacy.is_file() or legacy.resolve() == db_path.resolve():
        return None
    if db_path.exists():
        return (f"store: {db_path} (an older store at {legacy.resolve()} is not used: set "
                "CONTEXT_PROXY_DB to it to use it, or remove it)")
    # The side files go first: a WAL file left behind would hold the last writes.
    for suffix in (*SQLITE_SIDE_FILES, ""):
        side = legacy.with_name(legacy.name + suffix)
        if side.exists():
            shutil.move(side, db_path.with_name(db_path.name + suffix))
    return f"store: moved the store at {legacy.resolve()} (the older default) to {db_path}"


def _tell(line: str | None, announce: bool) -> None:
    if line is None:
        return
    if announce:
        print(line, file=sys.stderr)
    else:
        logging.getLogger("context_proxy").info("%s", line)


def store_name(settings: Settings) -> str:
    """The store the settings name, for a person: the SQLite file or the URL without its
    password."""
    if settings.database_url:
        from proxy.store.postgres import public_url

        return public_url(settings.database_url)
    return str(settings.db_path)


def check_store(settings: Settings) -> None:
    open_store(settings).close()


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; ``ConfigError`` naming the setting at
    fault (unknown host, address not on this machine, port in use or not allowed)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"{HOST_SETTING}: cannot resolve {host!r}: {e}") from None
    family, _, _, _, address = infos[0]
    try:
        sock = socket.create_server(address, family=family, backlog=1024)
    except OSError as e:
        setting = PORT_SETTING if e.errno in (98, 13) else HOST_SETTING  # EADDRINUSE, EACCES
        reason = "already in use" if e.errno == 98 else (e.strerror or str(e))
        raise ConfigError(f"{setting}: cannot listen on {host}:{port}: {reason}") from None
    sock.setblocking(False)
    return sock


def public_url(url: str) -> str:
    """``url`` without credentials or a query (neither belongs in a log)."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def startup_line(settings: Settings, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    policies = str(settings.policies_dir) if settings.policies_dir else "none (built-in defaults)"
    return (f"context-proxy listening on http://{host}:{port}; upstream "
            f"{public_url(settings.upstream_url)}; policies {policies}; store {_store(settings)}; "
            f"auth {settings.auth_mode}")


def _store(settings: Settings) -> str:
    if settings.database_url:
        from proxy.store.postgres import public_url

        return f"postgresql {public_url(settings.database_url)}"
    return f"sqlite {settings.db_path}"


# A chat request parses into about a thousand containers that all die when it ends. At the
# collector's default first threshold (700 more allocations than deallocations) a few requests
# in flight trigger it several times per request, and each run walks the bodies still in flight;
# at 50,000 they are gone before it runs. Cycles are still collected, a little later.
COLLECTOR_THRESHOLDS = (50_000, 20, 10)


# The interpreter's default switch interval is 5 ms: a store thread whose query answered waits
# up to that long for the lock while the event loop's thread runs Python, at every statement
# of a transaction (send, then read the answer), which under load made a six-statement write
# take 60-130 ms and a backlog of queued writes drain for seconds. At 1 ms a thread waiting
# for the lock gets it sooner; the loop's thread pays only when another thread asks for it.
SWITCH_INTERVAL_S = 0.001


def tune_switching() -> None:
    """For a serving process: threads that wait for the interpreter lock get it within 1 ms
    (``SWITCH_INTERVAL_S``) rather than 5."""
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))


def tune_collector() -> None:
    """For a serving process, once start-up is done: what start-up made lives as long as the
    process (frozen, out of the collector's way), and the collector runs less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


# glibc serves an allocation above its mmap threshold with a fresh mapping and returns it to the
# system when freed. orjson's parse buffer is about ten times the body, and a conversation's
# body grows every turn, so each request's buffer is a little larger than the last and beats
# glibc's self-adjusting threshold: one mmap, munmap and ~600 page faults per 2 MB request
# (~0.7 ms). A fixed 32 MiB threshold (glibc's ceiling) and a trim threshold above it keep such
# buffers on the heap, reused from one request to the next.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 128 * 1024 * 1024


def tune_allocator() -> bool:
    """For a serving process on glibc: large buffers stay on the heap between requests (see
    above). Whether it applied (False elsewhere, e.g. musl, where nothing changes)."""
    try:  # the C library's own answer: no scan of the executable, as platform.libc_ver does
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # not glibc, or no such name here
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


