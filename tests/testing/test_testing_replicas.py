"""Replicas of the proxy (``proxy.testing.replicas``) before any is spawned: the policies folder
they share, the round-robin over the live ones, reading a replica's port off its start-up line
and SIGKILL taking one out of the rotation (serving: ``tests/e2e/test_replicas.py``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.testing.replicas import Replicas

pytestmark = pytest.mark.own_store  # never started: no replica opens a store


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(tmp_path, "postgresql://u@db/x", count=3, policies="defaults: {x: 1}\n")
    yield r
    r.loop.close()


def test_they_share_one_policies_folder(replicas: Replicas, tmp_path: Path) -> None:
    assert (tmp_path / "policies" / "platform.yaml").read_text() == "defaults: {x: 1}\n"
    (tmp_path / "x").mkdir()
    bare = Replicas(tmp_path / "x", "postgresql://u@db/x")
    assert (tmp_path / "x" / "policies" / "platform.yaml").read_text() == "defaults: {}\n"
    bare.loop.close()


def test_urls_are_handed_out_in_turn_over_the_live_replicas(replicas: Replicas) -> None:
    replicas.ports, replicas.live = [8001, 8002, 8003], [0, 1, 2]
    assert [replicas.next_url() for _ in range(4)] == [
        "http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1", "http://127.0.0.1:8003/v1",
        "http://127.0.0.1:8001/v1"]


def test_a_port_is_read_off_the_start_up_line_and_a_kill_leaves_the_rotation(
        replicas: Replicas) -> None:
    replicas.log_path(0).write_text("INFO context-proxy listening on http://127.0.0.1:40123; "
                                    "upstream ...\n")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    replicas.procs, replicas.live = [sleeper], [0]
    assert replicas._port(0) == 40123 and "listening" in replicas.log(0)
    replicas.kill(0)
    assert sleeper.returncode == -9 and replicas.live == []


def test_a_replica_that_exits_before_its_line_is_reported(replicas: Replicas) -> None:
    replicas.log_path(0).write_text("error: CONTEXT_PROXY_DATABASE_URL: cannot connect\n")
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    replicas.procs = [done]
    with pytest.raises(RuntimeError, match="replica 0 exited: error: CONTEXT_PROXY_DATABASE"):
        replicas._port(0)
