"""How long a real Codex CLI session takes through the proxy against straight to the upstream.

The same 25-read session (``proxy.testing.agent_model``: the fake plays the model) is run by the
real ``codex`` binary in two ways, alternately, ``--runs`` times each:

- ``direct``: Codex's custom provider (HTTP) pointed straight at the fake upstream;
- ``proxy``: Codex's built-in provider pointed at the proxy, which it reaches over the Responses
  API's WebSocket mode (a refused upgrade would cost it seven retries before HTTP).

The window is one the session fits (without the proxy it would run out of room at a small
one), so both ways send the same requests and the difference is the proxy's. It prints each
run's wall time, the medians and the difference, and the proxy's answers to the
upgrade (101 expected, never 405). ``CONTEXT_PROXY_AGENTS_BIN`` names the folder holding the
``codex`` binary (``.ci/run`` installs it in ``.agents/node_modules/.bin``).

    .venv/bin/python bench/agent_sessions.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from proxy.testing import agent_model
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.harness import Harness

MODEL = "gpt-5.5"
WINDOW = 200_000  # the session fits it: straight to the upstream works, the requests are the same
COMMON = f'model = "{MODEL}"\napproval_policy = "never"\nsandbox_mode = "danger-full-access"\n'


def codex() -> str:
    folder = os.environ.get("CONTEXT_PROXY_AGENTS_BIN", ".agents/node_modules/.bin")
    found = shutil.which("codex", path=folder) or shutil.which("codex")
    if found is None:
        sys.exit("codex not found: set CONTEXT_PROXY_AGENTS_BIN (npm install @openai/codex)")
    return found


def run(home: Path, workspace: Path, config: str, key: str | None) -> float:
    """One session's wall time, from the start of ``codex exec`` to its exit."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "config.toml").write_text(config)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(home),
           "LANG": "C.UTF-8", "NO_COLOR": "1", "PROXY_KEY": key or "sk-direct"}
    if key is not None:  # the built-in provider: the key stored by codex itself
        subprocess.run([codex(), "login", "--with-api-key"], input=key + "\n", env=env,
                       capture_output=True, text=True, check=True, timeout=60)
    start = time.perf_counter()
    done = subprocess.run([codex(), "exec", "--skip-git-repo-check", "--json", agent_model.TASK],
                          cwd=workspace, env=env, input="", capture_output=True, text=True,
                          timeout=300, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"codex exited {done.returncode}: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="sessions of each kind (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace = root / "work"
        workspace.mkdir()
        agent_model.write_workspace(workspace)
        policies = root / "policies"
        policies.mkdir()
        (policies / "platform.yaml").write_text(
            f'models: {{"{MODEL}": {{context_window: {WINDOW}}}}}\n')
        fake = FakeUpstream(models={MODEL: WINDOW}, responder=agent_model.AgentModel(
            str(workspace)), summarizer=agent_model.fact_summarizer, record=False)
        with Harness(root, fake=fake, env={"CONTEXT_PROXY_POLICIES": str(policies)}) as h:
            key = h.create_key("acme")
            direct_cfg = COMMON + f'model_provider = "local"\n\n[model_providers.local]\n' \
                f'name = "fake"\nbase_url = "{h.fake.base_url}"\nenv_key = "PROXY_KEY"\n' \
                'wire_api = "responses"\n'
            proxy_cfg = COMMON + f'openai_base_url = "{h.base_url}"\n'
            times: dict[str, list[float]] = {"direct": [], "proxy": []}
            for i in range(args.runs):
                times["direct"].append(run(root / f"d{i}", workspace, direct_cfg, None))
                times["proxy"].append(run(root / f"p{i}", workspace, proxy_cfg, key))
            upgrades = [a.status for a in h.answers if a.method == "GET"
                        and a.path == "/v1/responses"]
    for kind, values in times.items():
        print(f"{kind:7s} " + " ".join(f"{v:6.2f}" for v in values) +
              f"   median {statistics.median(values):6.2f} s")
    delta = statistics.median(times["proxy"]) - statistics.median(times["direct"])
    print(f"proxy - direct: {delta:+.2f} s per session (target <= +3 s); "
          f"upgrade answers: {sorted(set(upgrades))} x{len(upgrades)}")


if __name__ == "__main__":
    main()
