"""Start-up: how long ``context-proxy serve`` takes to answer ``/healthz``, and how long each bad
setting takes to end it with its one line (SPEC section 9: ``/healthz`` within 3 s).

    .venv/bin/python bench/startup.py [--runs 5]

Each run starts a fresh process on a fresh SQLite file and polls ``/healthz`` every 10 ms; the
figure is the median over the runs, beside the time of ``python -c pass`` in the same run (the
interpreter's own floor on this machine).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
       "CONTEXT_PROXY_UPSTREAM_API_KEY": "sk-bench-startup"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def time_to_healthz(tmp: Path, run: int) -> float:
    port = free_port()
    env = {**ENV, "CONTEXT_PROXY_DB": str(tmp / f"run{run}.db")}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        while not healthy(port):
            if proc.poll() is not None:
                raise SystemExit(f"serve exited with {proc.returncode}")
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(30)


def time_to_fail(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "proxy.cli", *args], cwd=ROOT, capture_output=True,
                         text=True, env={**ENV, **env}, timeout=60)
    return time.perf_counter() - start, out.returncode, out.stderr.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        floor = statistics.median(
            _timed([sys.executable, "-c", "pass"]) for _ in range(runs))
        ready = [time_to_healthz(tmp, i) for i in range(runs)]
        print(f"/healthz after serve starts: median {statistics.median(ready):.2f} s, "
              f"max {max(ready):.2f} s over {runs} runs (python -c pass: {floor:.2f} s); "
              f"target 3 s: {'PASS' if max(ready) <= 3 else 'FAIL'}")
        (tmp / "a-file").write_text("x")
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            cases = {
                "port in use": (["serve", "--port", str(busy.getsockname()[1])], {}),
                "--port 70000": (["serve", "--port", "70000"], {}),
                "--host 999.1.1.1": (["serve", "--host", "999.1.1.1"], {}),
                "unwritable CONTEXT_PROXY_DB": (
                    ["serve"], {"CONTEXT_PROXY_DB": str(tmp / "a-file" / "x.db")}),
                "keys create, unwritable CONTEXT_PROXY_DB": (
                    ["keys", "create", "--org", "a"],
                    {"CONTEXT_PROXY_DB": str(tmp / "a-file" / "x.db")}),
                "CONTEXT_PROXY_POLICIES=./no-such-dir": (
                    ["serve"], {"CONTEXT_PROXY_POLICIES": "./no-such-dir"}),
            }
            for name, (args, env) in cases.items():
                took, code, err = time_to_fail(args, env)
                print(f"{name:<42} exit {code} in {took:.2f} s: {err}")


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
