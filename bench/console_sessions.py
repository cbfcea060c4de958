"""Console sessions across replicas: sign-out, sign-in throttling and ``Secure`` cookies.

Three replicas (``python -m proxy.cli serve``) on one fresh PostgreSQL schema, the console on
(``CONTEXT_PROXY_ADMIN_TOKEN``), ``127.0.0.1`` a trusted front end
(``CONTEXT_PROXY_TRUSTED_PROXIES``). It measures:

1. a session signed in on replica 0 and signed out there: how long until replicas 1 and 2
   refuse its cookie (polled every 20 ms), that a write with it is refused, that another
   session lives on, and that a replica started afterwards refuses it from its first answer;
2. 100 wrong sign-ins in 10 s (one every 95 ms), to one replica, then round-robin to the two
   others:
   when the first 429 came, its ``Retry-After``, that the right token is refused while the
   throttle holds, the WARNING lines and ``context_proxy_console_signins_throttled_total``;
3. the session cookie's ``Secure`` attribute when the sign-in came through the trusted front
   end saying ``X-Forwarded-Proto: https``, without that header, and on a replica that trusts
   no front end.

It exits 1 when a bound fails (refused within 2 s, 429 before the 100th wrong sign-in,
``Secure`` exactly when the front end is trusted and says https).

    .venv/bin/python bench/console_sessions.py [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

import httpx  # noqa: E402

from proxy.console.session import COOKIE  # noqa: E402
from proxy.store.postgres import connect  # noqa: E402
from proxy.testing.replicas import Replicas  # noqa: E402

DEFAULT_DB = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
TOKEN = "bench-console-token-" + secrets.token_hex(8)
WITHIN_S = 2.0
ENV = {"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN, "CONTEXT_PROXY_TRUSTED_PROXIES": "127.0.0.1"}


def ui(r: Replicas, i: int) -> str:
    return r.url(i).removesuffix("/v1") + "/admin/ui/"


def sign_in(base: str) -> tuple[str, str]:
    """A new session: its cookie and a form's CSRF token."""
    with httpx.Client(base_url=base, timeout=30) as c:
        resp = c.post("login", data={"token": TOKEN})
        if resp.status_code != 303:
            raise RuntimeError(f"sign-in answered {resp.status_code}: {resp.text[:200]}")
        page = c.get("orgs/acme/policy")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        if found is None:
            raise RuntimeError("no CSRF token on the policy page")
        return c.cookies[COOKIE], found[1]


def set_cookie(base: str, headers: dict[str, str] | None = None) -> str:
    """The Set-Cookie line of a sign-in (a Secure cookie is not sent back over plain HTTP)."""
    resp = httpx.post(base + "login", data={"token": TOKEN}, headers=headers or {}, timeout=30)
    if resp.status_code != 303:
        raise RuntimeError(f"sign-in answered {resp.status_code}")
    return resp.headers["set-cookie"]


def accepted(base: str, cookie: str) -> bool:
    return httpx.get(base, cookies={COOKIE: cookie}, timeout=30).status_code == 200


def refused_after(base: str, cookie: str, since: float, bound_s: float) -> float | None:
    """Seconds from ``since`` until ``base`` refuses ``cookie`` (None: not within 5 bounds)."""
    while accepted(base, cookie):
        if time.monotonic() - since > 5 * bound_s:
            return None
        time.sleep(0.02)
    return time.monotonic() - since


def folder(tmp: Path, name: str) -> Path:
    (tmp / name).mkdir()
    return tmp / name


def sessions(r: Replicas, tmp: Path, url: str, checks: list[tuple[str, bool]]) -> None:
    cookie, csrf = sign_in(ui(r, 0))
    kept, _ = sign_in(ui(r, 1))
    print(f"signed in on replica 0; accepted by 1 and 2: "
          f"{accepted(ui(r, 1), cookie) and accepted(ui(r, 2), cookie)}")
    out = httpx.post(ui(r, 0) + "logout", data={"csrf": csrf}, cookies={COOKIE: cookie},
                     timeout=30)
    since = time.monotonic()
    here = not accepted(ui(r, 0), cookie)
    took = [refused_after(ui(r, i), cookie, since, WITHIN_S) for i in (1, 2)]
    write = httpx.post(ui(r, 1) + "orgs/acme/policy/clear", data={"csrf": csrf},
                       cookies={COOKIE: cookie}, timeout=30).status_code
    print(f"signed out on replica 0 ({out.status_code}): refused there at once: {here}; by "
          f"replica 1 after {fmt(took[0])}, by replica 2 after {fmt(took[1])}; a write with "
          f"it on replica 1: {write}; another session still accepted: "
          f"{accepted(ui(r, 2), kept)}")
    checks += [("refused where signed out", here),
               ("refused by the others within 2 s", all(t is not None and t <= WITHIN_S
                                                         for t in took)),
               ("a write with it refused", write == 403),
               ("another session lives on", accepted(ui(r, 2), kept))]
    with Replicas(folder(tmp, "later"), url, 1, policies="defaults: {}\n", env=ENV) as later:
        fresh = not accepted(ui(later, 0), cookie)
        print(f"a replica started after the sign-out refuses it: {fresh}; accepts the other "
              f"session: {accepted(ui(later, 0), kept)}")
        checks += [("refused after a restart", fresh)]


def fmt(seconds: float | None) -> str:
    return "never (within 10 s)" if seconds is None else f"{seconds * 1000:.0f} ms"


def throttled_total(r: Replicas) -> int:
    total = 0
    for i in range(r.count):
        text = httpx.get(r.url(i).removesuffix("/v1") + "/metrics", timeout=30).text
        total += sum(int(float(m)) for m in re.findall(
            r"context_proxy_console_signins_throttled_total\{[^}]*\} (\S+)", text))
    return total


def wrong_sign_ins(r: Replicas, which: list[int], label: str,
                   checks: list[tuple[str, bool]]) -> None:
    before, started = throttled_total(r), time.monotonic()
    statuses, retry_after = [], ""
    for n in range(100):
        resp = httpx.post(ui(r, which[n % len(which)]) + "login",
                          data={"token": f"wrong-{secrets.token_hex(4)}"}, timeout=30)
        statuses.append(resp.status_code)
        if resp.status_code == 429 and not retry_after:
            retry_after = resp.headers.get("Retry-After", "")
        time.sleep(max(0.0, started + 0.095 * (n + 1) - time.monotonic()))
    right = httpx.post(ui(r, which[0]) + "login", data={"token": TOKEN}, timeout=30)
    first = statuses.index(429) + 1 if 429 in statuses else None
    print(f"100 wrong sign-ins in {time.monotonic() - started:.1f} s, {label}: "
          f"{statuses.count(401)} x 401, {statuses.count(429)} x 429 (the first at #{first}, "
          f"Retry-After {retry_after or '-'} s); the right token then: {right.status_code}; "
          f"throttled counted: {throttled_total(r) - before}")
    checks += [(f"429 before the 100th ({label})", first is not None and statuses[-1] == 429),
               (f"the right token waits too ({label})", right.status_code == 429)]


def secure_cookie(r: Replicas, tmp: Path, url: str, checks: list[tuple[str, bool]]) -> None:
    https = {"X-Forwarded-Proto": "https"}
    behind = "secure" in set_cookie(ui(r, 2), https).lower()
    plain = "secure" in set_cookie(ui(r, 2)).lower()
    with Replicas(folder(tmp, "untrusting"), url, 1, policies="defaults: {}\n",
                  env={"CONTEXT_PROXY_ADMIN_TOKEN": TOKEN}) as other:
        untrusted = "secure" in set_cookie(ui(other, 0), https).lower()
    print(f"Secure cookie: behind the trusted front end saying https: {behind}; without the "
          f"header: {plain}; the header from a front end not trusted: {untrusted}")
    checks += [("Secure behind the trusted TLS front end", behind and not plain),
               ("no Secure on an untrusted header", not untrusted)]


def main(args: argparse.Namespace) -> int:
    schema = "bench_console_" + secrets.token_hex(4)
    with connect(args.database_url) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in args.database_url else "?"
    url = f"{args.database_url}{sep}options=-csearch_path%3D{schema}"
    tmp = Path(tempfile.mkdtemp(prefix="console-sessions-"))
    checks: list[tuple[str, bool]] = []
    try:
        with Replicas(tmp, url, 3, policies="defaults: {}\n", env=ENV) as r:
            sessions(r, tmp, url, checks)
            secure_cookie(r, tmp, url, checks)  # before the throttle holds this address
            wrong_sign_ins(r, [1], "to one replica", checks)
            wrong_sign_ins(r, [0, 2], "round-robin to the two others", checks)
            warnings = sum(r.log(i).count("console sign-in throttled") for i in range(3))
            tracebacks = sum(r.log(i).count("Traceback") for i in range(3))
            print(f"WARNING lines about throttling: {warnings}; tracebacks in the logs: "
                  f"{tracebacks}")
            checks += [("no traceback", tracebacks == 0)]
    finally:
        with connect(args.database_url) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    failed = [name for name, ok in checks if not ok]
    print("FAIL: " + "; ".join(failed) if failed else "PASS: every check")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_DB)
    raise SystemExit(main(parser.parse_args()))
