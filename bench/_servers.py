"""The servers ``overhead.py`` measures, each started in its own process on a loopback port.

The fake upstream (``serve_fake``, run as ``overhead.py --serve-fake``; the ``direct``
baseline), the bare relay, context-proxy (``python -m proxy.cli serve`` on a fresh SQLite file,
or on one loaded by ``policy_load.py``) and LiteLLM's proxy. Each ``start_*`` waits for the
server's health endpoint and then until it is idle, and returns its ``Target``; ``start_all``
starts several at once and turns a failure into a ``Target`` whose ``error`` says why.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp
from _procs import ROOT, Procs, Target, child_env, tail, wait_http, wait_idle
from _workload import MODEL, MODELS, build_messages

BENCH = ROOT / "bench"
LITELLM_KEY = "sk-bench-litellm-0123456789abcdef0123456789abcdef"
UPSTREAM_KEY = "sk-bench-upstream-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_fake(chunk_delay_ms: float) -> None:
    """Child process: run the fake upstream on an OS-chosen port; print its base URL."""
    from proxy.testing import fake_upstream as fakeupstream

    try:
        fakeupstream.approx_tokens(build_messages())
    except Exception as e:  # the token counter being edited: a fixed-cost stand-in, same for all
        print(f"fake: token counting unavailable ({type(e).__name__}: {e}); using len/4",
              file=sys.stderr)
        fakeupstream.approx_tokens = lambda messages: len(json.dumps(messages)) // 4

    # No prompt cache: this bench times the relays, and the baseline should stay cheap.
    fake = fakeupstream.FakeUpstream(models=dict(MODELS), record=False,
                                     stream_delay_s=chunk_delay_ms / 1000,
                                     cache=fakeupstream.PromptCache(enabled=False))
    parent = os.getppid()

    async def run() -> None:
        url = await fake.start()
        gc.collect()
        gc.freeze()  # the baseline should not pause to scan its import-time heap
        print(url, flush=True)
        while os.getppid() == parent:  # exit when the bench is gone
            await asyncio.sleep(1)

    asyncio.run(run())


async def start_fake(procs: Procs, chunk_delay_ms: float) -> str:
    proc = procs.spawn("fake", [sys.executable, str(BENCH / "overhead.py"), "--serve-fake",
                                "--chunk-delay-ms", str(chunk_delay_ms)],
                       child_env({}), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    url = line.decode().strip()
    if not url.startswith("http://"):
        raise RuntimeError(f"fake upstream did not start: {tail(procs.tmp / 'fake.log')}")
    return url


def direct_target(procs: Procs, upstream: str) -> Target:
    return Target("direct", "direct (fake)", url=upstream + "/chat/completions",
                  headers={"Authorization": f"Bearer {UPSTREAM_KEY}"},
                  log=procs.tmp / "fake.log")


async def _ready(t: Target, session: aiohttp.ClientSession, proc: subprocess.Popen[bytes],
                 port: int, health: str, timeout_s: float, key: str) -> Target:
    await wait_http(session, f"http://127.0.0.1:{port}{health}", proc, timeout_s)
    await wait_idle(proc)
    t.url = f"http://127.0.0.1:{port}/v1/chat/completions"
    t.headers = {"Authorization": f"Bearer {key}"}
    t.pid = proc.pid
    return t


async def start_bare(procs: Procs, session: aiohttp.ClientSession, upstream: str) -> Target:
    t = Target("bare", "bare relay", log=procs.tmp / "bare.log")
    port = free_port()
    proc = procs.spawn("bare", [sys.executable, str(BENCH / "bare_relay.py"), "--port",
                                str(port), "--upstream", upstream], child_env({}))
    return await _ready(t, session, proc, port, "/healthz", 30, "sk-bench-client")


async def start_context_proxy(procs: Procs, session: aiohttp.ClientSession, upstream: str,
                              loaded: bool = False) -> Target:
    """context-proxy on an empty database, or (``loaded``) on one holding 1,000 organizations
    with policy layers and 10,000 keys (``bench/policy_load.py``)."""
    name = "cp-loaded" if loaded else "context-proxy"
    t = Target("cp-loaded" if loaded else "cp", "cp (1k orgs)" if loaded else "context-proxy",
               log=procs.tmp / f"{name}.log")
    port = free_port()
    db = procs.tmp / f"{name}.db"
    env = child_env({"CONTEXT_PROXY_UPSTREAM_URL": upstream,
                     "CONTEXT_PROXY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                     "CONTEXT_PROXY_DB": str(db),
                     "CONTEXT_PROXY_PORT": str(port), "CONTEXT_PROXY_HOST": "127.0.0.1"})
    if loaded:
        from policy_load import populate

        key = await asyncio.to_thread(populate, db)
    else:
        created = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "proxy.cli", "keys", "create", "--org", "bench"],
            env=env, cwd=ROOT, capture_output=True, timeout=120, check=False)
        if created.returncode != 0:
            raise RuntimeError(f"keys create failed: {created.stderr.decode()[-400:]}")
        key = json.loads(created.stdout.decode().strip().splitlines()[-1])["key"]
    proc = procs.spawn(name, [sys.executable, "-m", "proxy.cli", "serve"], env)
    return await _ready(t, session, proc, port, "/healthz", 60, key)


async def start_cp_loaded(procs: Procs, session: aiohttp.ClientSession, upstream: str
                          ) -> Target:
    return await start_context_proxy(procs, session, upstream, loaded=True)


LITELLM_LOG_CONFIG = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)s %(name)s %(message)s"}},
    "handlers": {"err": {"class": "logging.StreamHandler", "formatter": "plain",
                         "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn": {"handlers": ["err"], "level": "WARNING"},
                "uvicorn.error": {"level": "WARNING"},
                "uvicorn.access": {"handlers": ["err"], "level": "WARNING", "propagate": False}},
}


async def start_litellm(procs: Procs, session: aiohttp.ClientSession, upstream: str) -> Target:
    t = Target("litellm", "LiteLLM proxy", log=procs.tmp / "litellm.log")
    exe = Path(sys.executable).parent / "litellm"
    if not exe.exists():
        raise RuntimeError(f"{exe} not found: install 'litellm[proxy]'")
    cfg = procs.tmp / "litellm.yaml"
    # JSON is YAML: no PyYAML needed here.
    cfg.write_text(json.dumps({
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_base": upstream, "api_key": UPSTREAM_KEY}}],
        "litellm_settings": {"telemetry": False},
        "general_settings": {"master_key": LITELLM_KEY},
    }, indent=1))
    log_cfg = procs.tmp / "litellm-log.json"
    log_cfg.write_text(json.dumps(LITELLM_LOG_CONFIG))
    port = free_port()
    env = child_env({"LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR",
                     "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "DISABLE_ADMIN_UI": "True"})
    proc = procs.spawn("litellm", [str(exe), "--config", str(cfg), "--host", "127.0.0.1",
                                   "--port", str(port), "--num_workers", "1",
                                   "--log_config", str(log_cfg)], env)
    return await _ready(t, session, proc, port, "/health/readiness", 150, LITELLM_KEY)


def awecompress_exe() -> Path | None:
    """awecompress's command: ``$BENCH_AWECOMPRESS``, else beside this Python, else in a
    ``.venv-awe`` virtualenv at the repository root (``bench/README.md``); None when absent."""
    named = os.environ.get("BENCH_AWECOMPRESS")
    for exe in ([Path(named)] if named else
                [Path(sys.executable).parent / "awecompress", ROOT / ".venv-awe/bin/awecompress"]):
        if exe.exists():
            return exe
    return None


async def start_awecompress(procs: Procs, session: aiohttp.ClientSession, upstream: str
                            ) -> Target:
    """awecompress (PyPI) in front of the fake: its default compression threshold (60,000
    estimated tokens), far above every request here, so it estimates and relays."""
    t = Target("awe", "awecompress", log=procs.tmp / "awecompress.log")
    exe = awecompress_exe()
    if exe is None:
        raise RuntimeError("not installed: python -m venv .venv-awe && "
                           ".venv-awe/bin/pip install awecompress (or set BENCH_AWECOMPRESS)")
    home = procs.tmp / "awecompress"
    home.mkdir(exist_ok=True)
    port = free_port()
    cfg = home / "config.json"
    cfg.write_text(json.dumps({"port": port, "upstream": upstream.removesuffix("/v1"),
                               "dbPath": str(home / "summaries.db")}))
    env = child_env({"AWECOMPRESS_CONFIG_DIR": str(home)})
    proc = procs.spawn("awecompress", [str(exe), "serve", "--config", str(cfg), "--host",
                                       "127.0.0.1", "--port", str(port)], env)
    return await _ready(t, session, proc, port, "/", 60, UPSTREAM_KEY)


Starter = Callable[[Procs, aiohttp.ClientSession, str], Awaitable[Target]]
# (key, label, log file name, starter) of every relay the bench can measure
STARTERS: dict[str, tuple[str, str, Starter]] = {
    "bare": ("bare relay", "bare", start_bare),
    "cp": ("context-proxy", "context-proxy", start_context_proxy),
    "cp-loaded": ("cp (1k orgs)", "cp-loaded", start_cp_loaded),
    "litellm": ("LiteLLM proxy", "litellm", start_litellm),
    "awe": ("awecompress", "awecompress", start_awecompress),
}


async def start_all(procs: Procs, session: aiohttp.ClientSession, upstream: str,
                    keys: Sequence[str]) -> list[Target]:
    """Start the relays named by ``keys`` concurrently; one that fails gets a Target whose
    ``error`` says why (with the tail of its log) and the run goes on without it."""
    results = await asyncio.gather(*(STARTERS[k][2](procs, session, upstream) for k in keys),
                                   return_exceptions=True)
    targets: list[Target] = []
    for key, res in zip(keys, results, strict=True):
        label, log, _ = STARTERS[key]
        if isinstance(res, BaseException):
            targets.append(Target(key, label, error=f"did not start: {res} "
                                                    f"{tail(procs.tmp / f'{log}.log')}".strip()))
        else:
            targets.append(res)
    return targets
