"""``X-Context-Overhead-Ms`` against the added latency it should explain: at concurrency 1,
requests alternate between the fake upstream itself (``direct``) and context-proxy in front of
it; the added latency is the difference of their medians, compared with the median of what the
proxy says in the header (SPEC section 6: within 1 ms). The header is the proxy's time from its
middleware's entry to its answer's headers, less the waits on the upstream; what it cannot see
(aiohttp reading the request's head, writing the answer, the loopback legs of the extra hop)
is what every relay pays, so the bare relay is measured the same way beside it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from _procs import Target

HEADER = "X-Context-Overhead-Ms"
TOLERANCE_MS = 1.0


@dataclass(frozen=True)
class HeaderCheck:
    """Medians in milliseconds: the header's, context-proxy's latency minus direct's, and
    context-proxy's minus the bare relay's."""

    header_ms: float
    added_ms: float
    over_bare_ms: float
    n: int

    @property
    def ok(self) -> bool:
        return abs(self.header_ms - self.added_ms) <= TOLERANCE_MS


async def _timed(session: aiohttp.ClientSession, t: Target, body: bytes
                 ) -> tuple[float, str | None]:
    t0 = time.perf_counter()
    async with session.post(t.url, data=body, headers=t.headers) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{t.label}: HTTP {resp.status}")
        return (time.perf_counter() - t0) * 1000, resp.headers.get(HEADER)


async def header_check(session: aiohttp.ClientSession, direct: Target, bare: Target,
                       cp: Target, body: bytes, n: int) -> HeaderCheck:
    """``n`` non-streamed requests to each, alternating (so drift hits all alike)."""
    direct_ms, bare_ms, cp_ms, said = [], [], [], []
    for _ in range(n):
        direct_ms.append((await _timed(session, direct, body))[0])
        bare_ms.append((await _timed(session, bare, body))[0])
        took, header = await _timed(session, cp, body)
        if header is None:
            raise RuntimeError(f"{cp.label}: no {HEADER} header")
        cp_ms.append(took)
        said.append(float(header))
    cp_p50 = statistics.median(cp_ms)
    return HeaderCheck(statistics.median(said), cp_p50 - statistics.median(direct_ms),
                       cp_p50 - statistics.median(bare_ms), n)


def report_header(check: HeaderCheck, out: Callable[[str], None]) -> None:
    out(f"\n{HEADER} (non-streamed, concurrency 1, {check.n} requests each, alternating): "
        f"median header {check.header_ms:.2f} ms; added latency (median context-proxy - "
        f"median direct) {check.added_ms:.2f} ms; difference "
        f"{check.header_ms - check.added_ms:+.2f} ms "
        f"{'PASS' if check.ok else 'FAIL'} (within {TOLERANCE_MS:g} ms); context-proxy - bare "
        f"relay {check.over_bare_ms:.2f} ms (difference "
        f"{check.header_ms - check.over_bare_ms:+.2f} ms)")
