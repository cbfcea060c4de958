"""The report of ``overhead.py``: one table per scenario, then the targets as PASS/FAIL lines.

Added latency is a difference of percentiles, ``added pXX = pXX(relay) - pXX(direct)``, each
taken over its own distribution (requests are not paired). Every target is a ratio to the bare
relay measured in the same run, so it holds on any machine that is quiet while it runs:

1. context-proxy's added p50 <= 1.4 x the bare relay's, at concurrency 1 and 16, non-streamed
   and streamed (first chunk and last byte);
2. context-proxy's CPU time per request <= 1.3 x the bare relay's at concurrency 16,
   non-streamed and streamed (concurrency 1 is printed as information: at 100 ticks a second,
   its few hundred requests are too coarse to judge);
3. the large conversation (about 2 MB, 1,600 messages, one turn more per request): context-
   proxy's added p50 <= 1.2 x the bare relay's, with nothing masked or compacted;
4. the scenarios whose every request is new (``_workload.SCENARIOS``), at concurrency 1 and
   16: added p50 <= 1.4 x and CPU per request <= 1.3 x the bare relay's, and added p50 below
   awecompress's.
"""

from __future__ import annotations

from collections.abc import Callable

from _load import LARGE, Cell, LargeRun, pct
from _procs import Target
from _workload import LONG_WINDOW

MAX_RATIO_BARE = 1.4
MAX_CPU_RATIO_BARE = 1.3
MAX_RATIO_BARE_LARGE = 1.2

Out = Callable[[str], None]
Added = dict[str, tuple[float, float]]  # target key -> (added p50, added p99) in ms


def fmt(x: float | None, width: int = 8) -> str:
    return f"{'n/a':>{width}}" if x is None or x != x else f"{x:{width}.3f}"


def table(title: str, targets: list[Target], cell: Cell, out: Out) -> Added:
    """Print one table; return each relay's added p50 and p99."""
    direct = sorted(cell.samples.get("direct", []))
    d50, d99 = pct(direct, 50) * 1e3, pct(direct, 99) * 1e3
    out(f"\n{title}   (ms; added = relay percentile - direct percentile; CPU in us per "
        "request)")
    out(f"  {'target':15s} {'n':>5s} {'p50':>8s} {'p99':>8s} {'+p50':>8s} {'+p99':>8s} "
        f"{'+p50/bare':>10s} {'relay CPU':>10s} {'fake CPU':>9s}")
    added: Added = {}
    for t in targets:
        xs = sorted(cell.samples.get(t.key, []))
        if t.key != "direct" and (t.error is not None or not xs):
            why = t.error or "no samples"
            out(f"  {t.label:15s} {'n/a':>5s}   ({why[:90] + ' ...' if len(why) > 90 else why})")
            continue
        p50, p99 = pct(xs, 50) * 1e3, pct(xs, 99) * 1e3
        relay_cpu, fake_cpu = cell.cpu_us(t.key)
        cpu = (f"{'-' if relay_cpu is None or t.key == 'direct' else f'{relay_cpu:.0f}':>10s}"
               f" {'-' if fake_cpu is None else f'{fake_cpu:.0f}':>9s}")
        if t.key == "direct":
            out(f"  {t.label:15s} {len(xs):5d} {fmt(p50)} {fmt(p99)} {'-':>8s} {'-':>8s} "
                f"{'':>10s} {cpu}")
            continue
        a50, a99 = p50 - d50, p99 - d99
        added[t.key] = (a50, a99)
        bare = added.get("bare")
        ratio = f"{a50 / bare[0]:9.2f}x" if bare and bare[0] > 0 else f"{'n/a':>10s}"
        out(f"  {t.label:15s} {len(xs):5d} {fmt(p50)} {fmt(p99)} {fmt(a50)} {fmt(a99)} "
            f"{ratio} {cpu}")
    return added


class Verdicts:
    """Prints target lines; ``ok`` turns False at the first FAIL."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.ok = True

    def line(self, label: str, ok: bool | None, detail: str) -> None:
        verdict = "n/a " if ok is None else ("PASS" if ok else "FAIL")
        self.ok = self.ok and ok is not False
        self.out(f"  [{verdict}] {label:46s} {detail}")

    def info(self, label: str, detail: str) -> None:
        self.out(f"  [info] {label:46s} {detail}")

    def ratio(self, label: str, cp: float | None, bare: float | None, limit: float | None,
              unit: str, digits: int = 3) -> None:
        """``cp / bare <= limit`` (information only when ``limit`` is None)."""
        ok: bool | None
        if cp is None or bare is None or cp != cp or bare != bare:
            ok, detail = None, "missing samples"
        elif bare <= 0:
            ok, detail = cp <= 0, (f"cp {cp:.{digits}f} {unit}, bare {bare:.{digits}f} {unit} "
                                   "(bare adds nothing measurable)")
        else:
            r = cp / bare
            ok = limit is None or r <= limit
            detail = f"{r:.2f}x  (cp {cp:.{digits}f} {unit}, bare {bare:.{digits}f} {unit})"
        if limit is None:
            self.info(label, detail)
        else:
            self.line(label, ok, detail)

def scenario_targets(v: Verdicts, scenarios: dict[str, str],
                     cells: dict[tuple[str, int], Cell],
                     added: dict[tuple[str, int], Added]) -> None:
    """Per scenario and concurrency: context-proxy's added p50 and CPU per request against the
    bare relay's, and its added p50 below awecompress's (when awecompress ran)."""
    for name in scenarios:
        for conc in (1, 16):
            cell, got = cells.get((name, conc)), added.get((name, conc), {})

            def a50(who: str, got: Added = got) -> float | None:
                return got[who][0] if who in got else None

            v.ratio(f"{name} c={conc:<2d}: +p50 <= {MAX_RATIO_BARE}x bare", a50("cp"),
                    a50("bare"), MAX_RATIO_BARE, "ms")
            v.ratio(f"{name} c={conc:<2d}: CPU/request <= {MAX_CPU_RATIO_BARE}x bare",
                    cell.cpu_us("cp")[0] if cell else None,
                    cell.cpu_us("bare")[0] if cell else None, MAX_CPU_RATIO_BARE, "us", 0)
            cp, awe = a50("cp"), a50("awe")
            if awe is None:
                v.line(f"{name} c={conc:<2d}: +p50 < awecompress's", None,
                       "awecompress did not run (see its row)")
            elif cp is not None:
                v.line(f"{name} c={conc:<2d}: +p50 < awecompress's", cp < awe,
                       f"cp {cp:.3f} ms, awecompress {awe:.3f} ms")


def report(targets: list[Target], cells: dict[tuple[str, int], Cell], out: Out,
           large: LargeRun | None = None,
           scenarios: dict[str, str] | None = None) -> bool:
    """Print the tables and the targets; return whether every target was met. ``scenarios``
    (name -> title) names the cells keyed by scenario, measured non-streamed."""
    added: dict[tuple[str, int], Added] = {}
    scenarios = scenarios or {}
    for (metric, conc), cell in cells.items():
        title = f"{scenarios[metric]}, non-streamed" if metric in scenarios else metric
        added[(metric, conc)] = table(f"{title}, concurrency {conc}", targets, cell, out)
    if large is not None:
        added[LARGE] = table(large.title, large.targets, large.cell, out)
    for t in [*targets, *(large.targets if large else [])]:
        if t.error is not None and len(t.error) > 90:
            out(f"\nnote: {t.label}: {t.error}")
        elif t.errors and t.error is None:
            out(f"\nnote: {t.label}: {t.errors} of {t.requests} measured requests failed and "
                f"were left out; the first: {t.first_error}")

    v = Verdicts(out)
    out("\nTargets: context-proxy against the bare relay measured in this run")

    def p50(key: tuple[str, int], who: str) -> float | None:
        got = added.get(key, {}).get(who)
        return None if got is None else got[0]

    for conc in (1, 16) if ("non-streamed", 1) in cells else ():
        for metric in ("non-streamed", "first chunk", "last byte"):
            v.ratio(f"c={conc:<2d} {metric}: +p50 <= {MAX_RATIO_BARE}x bare",
                    p50((metric, conc), "cp"), p50((metric, conc), "bare"), MAX_RATIO_BARE,
                    "ms")
    for conc in (16, 1) if ("non-streamed", 1) in cells else ():
        for metric, mode in (("non-streamed", "non-streamed"), ("last byte", "streamed")):
            cell = cells.get((metric, conc))
            cp_cpu = cell.cpu_us("cp")[0] if cell else None
            bare_cpu = cell.cpu_us("bare")[0] if cell else None
            v.ratio(f"c={conc:<2d} {mode}: CPU/request"
                    + (f" <= {MAX_CPU_RATIO_BARE}x bare" if conc == 16 else ""),
                    cp_cpu, bare_cpu, MAX_CPU_RATIO_BARE if conc == 16 else None, "us", 0)
    if large is not None:
        h = large.headers
        window, masked = h.get("x-context-window", "?"), h.get("x-context-masked", "?")
        compaction = h.get("x-context-compaction", "?")
        v.line("large: nothing masked or compacted", None if not h else (
            window == str(LONG_WINDOW) and masked == "0" and compaction == "none"),
            f"window {window}, masked {masked}, compaction {compaction}, tokens "
            f"{h.get('x-context-tokens-before', '?')}" if h else "no answer from context-proxy")
        v.ratio(f"large c=1: +p50 <= {MAX_RATIO_BARE_LARGE}x bare", p50(LARGE, "cp"),
                p50(LARGE, "bare"), MAX_RATIO_BARE_LARGE, "ms")
    scenario_targets(v, scenarios, cells, added)
    out(f"\nAll targets met: {'yes' if v.ok else 'NO'}")
    return v.ok
