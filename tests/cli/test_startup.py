"""``serve`` start-up: a bad setting ends the process with one line naming it; a good start logs
one line naming the upstream, policies and store, then one access line per request."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from proxy.cli import startup
from proxy.errors import ConfigError
from proxy.settings import load_settings
from proxy.store.postgres import public_url
from proxy.testing.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 30  # not a timing check: a start-up that hangs fails instead of blocking CI


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env})


@pytest.fixture
def env(tmp_path: Path, database_url: str | None) -> dict[str, str]:
    """A ``serve`` on the suite's store (the subprocess inherits ``CONTEXT_PROXY_DATABASE_URL``)
    and a policies folder of its own."""
    (tmp_path / "policies").mkdir()
    return {"CONTEXT_PROXY_DB": str(tmp_path / "proxy.db"),
            "CONTEXT_PROXY_POLICIES": str(tmp_path / "policies"),
            "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-upstream-startup-0001"}


def one_line_naming(proc: subprocess.CompletedProcess[str], setting: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert setting in lines[0] and "Traceback" not in proc.stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_port_in_use(env: dict[str, str], busy_port: int) -> None:
    one_line_naming(cli(["serve", "--port", str(busy_port)], env), "--port")
    one_line_naming(cli(["serve"], {**env, "CONTEXT_PROXY_PORT": str(busy_port)}),
                    "CONTEXT_PROXY_PORT")


@pytest.mark.parametrize(("args", "extra", "setting"), [
    (["--port", "70000"], {}, "--port"),
    (["--port", "-1"], {}, "--port"),
    ([], {"CONTEXT_PROXY_PORT": "70000"}, "CONTEXT_PROXY_PORT"),
    (["--host", "999.1.1.1"], {}, "--host"),
    ([], {"CONTEXT_PROXY_HOST": "999.1.1.1"}, "CONTEXT_PROXY_HOST"),
    ([], {"CONTEXT_PROXY_LOG_FORMAT": "xml"}, "CONTEXT_PROXY_LOG_FORMAT"),
])
def test_bad_listen_settings(env: dict[str, str], args: list[str], extra: dict[str, str],
                             setting: str) -> None:
    one_line_naming(cli(["serve", *args], {**env, **extra}), setting)


def test_host_not_on_this_machine(env: dict[str, str]) -> None:
    # A well-formed address no interface has: the bind fails, naming the host setting.
    one_line_naming(cli(["serve", "--host", "192.0.2.1", "--port", "0"], env), "--host")


def test_missing_policies_folder(env: dict[str, str], tmp_path: Path) -> None:
    proc = cli(["serve"], {**env, "CONTEXT_PROXY_POLICIES": str(tmp_path / "no-such-dir")})
    one_line_naming(proc, "CONTEXT_PROXY_POLICIES")


def test_broken_yaml(env: dict[str, str]) -> None:
    Path(env["CONTEXT_PROXY_POLICIES"], "platform.yaml").write_text("compaction: [unclosed\n")
    one_line_naming(cli(["serve"], env), "platform.yaml")


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["keys", "create", "--org", "a"],
                                     ["keys", "list"]])
@pytest.mark.own_store
def test_unwritable_store(env: dict[str, str], tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    proc = cli(command, {**env, "CONTEXT_PROXY_DB": str(tmp_path / "a-file" / "proxy.db"),
                         "CONTEXT_PROXY_DATABASE_URL": ""})  # the SQLite file's own faults
    one_line_naming(proc, "CONTEXT_PROXY_DB")


@pytest.mark.own_store
def test_read_only_store(env: dict[str, str], tmp_path: Path) -> None:
    db = tmp_path / "ro.db"
    db.write_bytes(b"this is not a database file" * 100)
    one_line_naming(cli(["serve", "--port", "0"], {**env, "CONTEXT_PROXY_DB": str(db),
                                                   "CONTEXT_PROXY_DATABASE_URL": ""}),
                    "CONTEXT_PROXY_DB")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["keys", "list"],
                                     ["policy", "show", "--org", "acme"],
                                     ["dividers", "--org", "acme", "c1"]])
@pytest.mark.own_store
def test_unreachable_postgres_is_one_line_without_the_password(
        env: dict[str, str], command: list[str]) -> None:
    url = f"postgresql://proxy:pw-s3cret-1234@127.0.0.1:{closed_port()}/proxy"
    proc = cli(command, {**env, "CONTEXT_PROXY_DATABASE_URL": url})
    one_line_naming(proc, "CONTEXT_PROXY_DATABASE_URL")
    assert proc.returncode == 2
    assert "pw-s3cret-1234" not in proc.stderr and "proxy@127.0.0.1" in proc.stderr


@pytest.mark.own_store
def test_database_url_of_another_scheme(env: dict[str, str]) -> None:
    proc = cli(["serve", "--port", "0"],
               {**env, "CONTEXT_PROXY_DATABASE_URL": "mysql://proxy:pw-s3cret-1234@db/proxy"})
    one_line_naming(proc, "CONTEXT_PROXY_DATABASE_URL")
    assert proc.returncode == 2 and "pw-s3cret-1234" not in proc.stderr


# --- a good start ---


@pytest.fixture
def upstream() -> Iterator[str]:
    fake = FakeUpstream()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield asyncio.run_coroutine_threadsafe(fake.start(), loop).result(10)
    asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


class Served:
    """``serve --port 0`` in a subprocess; the port is read off its start-up line."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "serve", "--port", "0"], cwd=ROOT,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
                stdout=subprocess.DEVNULL, stderr=out)
        self.port = self._wait_for_port()

    def _wait_for_port(self) -> int:
        for _ in range(HANG_GUARD_S * 20):
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read_text())
            if found:
                return int(found.group(1))
            assert self.proc.poll() is None, self.log.read_text()
            threading.Event().wait(0.05)
        raise AssertionError("no start-up line")

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(HANG_GUARD_S)
        return self.log.read_text()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_startup_line_and_access_lines(env: dict[str, str], upstream: str, tmp_path: Path,
                                       log_format: str) -> None:
    env = {**env, "CONTEXT_PROXY_UPSTREAM_URL": upstream, "CONTEXT_PROXY_LOG_FORMAT": log_format}
    key = json.loads(cli(["keys", "create", "--org", "acme"], env).stdout)["key"]
    served = Served(env, tmp_path / "serve.log")
    try:
        base_url = f"http://127.0.0.1:{served.port}/v1"
        with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as client:
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "a secret-ish question"}],
                extra_headers={"X-Conversation-Id": "conv-log-1", "X-Request-Id": "req-log-1"})
        with openai.OpenAI(base_url=base_url, api_key="sk-wrong-key-9", max_retries=0) as bad, \
                pytest.raises(openai.AuthenticationError):
            bad.models.list()
    finally:
        text = served.stop()
    for secret in (key, "sk-wrong-key-9", env["CONTEXT_PROXY_UPSTREAM_API_KEY"], "secret-ish"):
        assert secret not in text
    lines = text.splitlines()
    if log_format == "json":
        docs = [json.loads(line) for line in lines]
        start = next(d for d in docs if "listening on" in d["message"])
        chat = next(d for d in docs if d.get("route") == "chat")
        assert (chat["status"], chat["conversation"], chat["outcome"], chat["request_id"]) == (
            200, "conv-log-1", "none", "req-log-1")
        assert chat["method"] == "POST" and chat["duration_ms"] >= 0
        assert any(d.get("route") == "relay" and d["status"] == 401 for d in docs)
        message = start["message"]
    else:
        message = next(line for line in lines if "listening on" in line)
        chat_line = next(line for line in lines if "route=chat" in line)
        assert '"POST /v1/chat/completions" 200' in chat_line
        assert "conversation=conv-log-1 outcome=none request_id=req-log-1" in chat_line
        assert any("route=relay" in line and '" 401 ' in line for line in lines)
    assert upstream.rstrip("/") in message and env["CONTEXT_PROXY_POLICIES"] in message
    url = os.environ.get("CONTEXT_PROXY_DATABASE_URL")  # the suite's PostgreSQL run
    assert (f"store postgresql {public_url(url)};" if url else env["CONTEXT_PROXY_DB"]) in message


def test_serving_process_tunes_the_collector() -> None:
    """What start-up made is frozen, and the collector's first threshold is raised so that the
    bodies of requests in flight die before it walks them (run apart: it changes the process)."""
    code = ("import gc; from proxy.cli import startup; before = gc.get_freeze_count(); "
            "startup.tune_collector(); "
            "print(gc.get_threshold() == startup.COLLECTOR_THRESHOLDS, "
            "gc.get_freeze_count() > before, startup.COLLECTOR_THRESHOLDS[0] >= 10_000)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True,
                         timeout=HANG_GUARD_S, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


def test_serving_process_switches_threads_within_a_millisecond() -> None:
    """A store thread whose answer came waits at most 1 ms for the interpreter lock (run
    apart: it changes the process)."""
    code = ("import sys; from proxy.cli import startup; sys.setswitchinterval(0.005); "
            "startup.tune_switching(); print(sys.getswitchinterval() <= 0.001)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True,
                         timeout=HANG_GUARD_S, check=True)
    assert out.stdout.split() == ["True"]


def test_serve_tunes_the_process_after_start_up() -> None:
    """``serve`` tunes the collector, the allocator and thread switching once the application
    is built (and before it serves requests)."""
    import inspect

    from proxy import cli as cli_module

    source = inspect.getsource(cli_module._serve)
    for call in ("startup.tune_collector()", "startup.tune_allocator()",
                 "startup.tune_switching()"):
        assert source.index(call) < source.index("web.run_app("), call


ALLOCATOR_PROBE = """
import platform, resource, sys, orjson
from proxy.cli import startup
applied = startup.tune_allocator() if sys.argv[1] == "tuned" else False
item = {"role": "tool", "tool_call_id": "call_1", "content": "x" * 1200}
def body(n): return orjson.dumps({"messages": [item] * n})
for n in (1600, 1601):  # a growing conversation of about 2 MB, as the proxy parses it
    orjson.loads(body(n))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in range(1602, 1610):
    orjson.loads(body(n))
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 8
print(platform.libc_ver()[0] == "glibc", applied, faults)
"""


def _probe_allocator(mode: str) -> tuple[bool, bool, float]:
    out = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE, mode], cwd=ROOT, text=True,
                         capture_output=True, timeout=HANG_GUARD_S, check=True)
    glibc, applied, faults = out.stdout.split()
    return glibc == "True", applied == "True", float(faults)


def test_tuned_allocator_keeps_a_growing_bodys_parse_buffer_on_the_heap() -> None:
    """On glibc, parsing a body a little larger than the last maps fresh memory every time
    (hundreds of page faults per 2 MB body) unless the allocator is tuned; tuned, the buffer
    is reused. Elsewhere the tuning says it did not apply."""
    glibc, applied, tuned_faults = _probe_allocator("tuned")
    assert applied == glibc
    if glibc:
        _, _, plain_faults = _probe_allocator("plain")
        assert plain_faults > 200  # the cost the tuning removes is there without it
        assert tuned_faults < 50


# --- the same checks in process ---------------------------------------------------------------


def test_listen_binds_or_names_the_setting_at_fault(busy_port: int) -> None:
    sock = startup.listen("127.0.0.1", 0)
    try:
        assert sock.getsockname()[1] > 0 and not sock.getblocking()
    finally:
        sock.close()
    with pytest.raises(ConfigError, match=r"--port: cannot listen on 127.0.0.1:\d+: already in"):
        startup.listen("127.0.0.1", busy_port)
    with pytest.raises(ConfigError, match="--host: cannot resolve"):
        startup.listen("no-such-host.invalid", 0)


def test_open_store_names_the_file_it_cannot_open(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    bad = load_settings({"CONTEXT_PROXY_DB": str(blocked / "proxy.db"),
                         "CONTEXT_PROXY_DATABASE_URL": ""})
    with pytest.raises(ConfigError, match="CONTEXT_PROXY_DB: cannot open the store at"):
        startup.open_store(bad)
    good = load_settings({"CONTEXT_PROXY_DB": str(tmp_path / "proxy.db"),
                          "CONTEXT_PROXY_DATABASE_URL": ""})
    startup.open_store(good, announce=True).close()
    assert capsys.readouterr().err == f"store: {tmp_path / 'proxy.db'}\n"
    assert startup.store_name(good) == str(tmp_path / "proxy.db")


def test_a_store_at_the_older_default_is_moved_with_its_side_files(tmp_path: Path) -> None:
    legacy = tmp_path / "cwd" / "context-proxy.db"
    legacy.parent.mkdir()
    for suffix in ("", "-wal"):
        legacy.with_name(legacy.name + suffix).write_text(suffix or "main")
    target = tmp_path / "data" / "context-proxy" / "context-proxy.db"
    line = startup.prepare_data_folder(target, legacy)
    assert line is not None and "moved the store" in line and not legacy.exists()
    assert target.read_text() == "main" and (target.parent / "context-proxy.db-wal").exists()
    legacy.write_text("again")
    kept = startup.prepare_data_folder(target, legacy)
    assert kept is not None and "is not used" in kept and legacy.exists()
    assert startup.prepare_data_folder(target, tmp_path / "none.db") is None


def test_the_startup_line_names_everything_without_secrets(tmp_path: Path) -> None:
    settings = load_settings({"CONTEXT_PROXY_DB": str(tmp_path / "p.db"),
                              "CONTEXT_PROXY_DATABASE_URL": "postgresql://u:pw-x@db:5433/cp",
                              "CONTEXT_PROXY_UPSTREAM_URL": "https://k:pw-y@up.example/v1?x=1"})
    sock = startup.listen("127.0.0.1", 0)
    try:
        line = startup.startup_line(settings, sock)
    finally:
        sock.close()
    assert line.startswith("context-proxy listening on http://127.0.0.1:")
    assert "upstream https://up.example/v1;" in line and "pw-" not in line
    assert "store postgresql postgresql://u@db:5433/cp" in line and line.endswith(
        "auth proxy_keys")
    assert startup.public_url("http://a:b@h:81/p?q") == "http://h:81/p"


def test_tuning_the_collector_and_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    monkeypatch.setattr(gc, "freeze", lambda: None)  # the test process keeps its collector
    before = gc.get_threshold()
    try:
        startup.tune_collector()
        assert gc.get_threshold() == startup.COLLECTOR_THRESHOLDS
    finally:
        gc.set_threshold(*before)
    assert startup.tune_allocator() == bool(os.confstr("CS_GNU_LIBC_VERSION"))
