"""The OpenAI Agents SDK 0.25.0 (Responses API, async client at the proxy) in a 25-read session
with a ``read_file`` function tool, through ``Runner.run`` and ``Runner.run_streamed``.

Its fixed part is tiny (short instructions, one tool), so at a 16k window the session keeps the
4 newest outputs verbatim: then both masking and compaction have work to do.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import openai
import pytest
from agent_sessions import Outcome, start
from conftest import need

from proxy.testing import agent_model
from proxy.testing.harness import Harness

pytestmark = pytest.mark.agents

MODEL = "gpt-5.5"
WINDOW = 16_384
KEEP_RECENT = 4


def agents_sdk() -> ModuleType:
    try:
        return importlib.import_module("agents")
    except ImportError:
        need("the OpenAI Agents SDK (openai-agents)", "pip install -e '.[test]'")


@pytest.mark.parametrize("model", [MODEL, "gpt-5.6"])  # gpt-5.6 binds its reasoning
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_agents_sdk_session(make_harness: Callable[..., Harness], tmp_path: Path,
                                  streamed: bool, model: str) -> None:
    agents = agents_sdk()
    s = start(make_harness, tmp_path, model, WINDOW, keep_recent=KEEP_RECENT)
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a text file of the workspace.

        Args:
            path: the file's path.
        """
        return (s.workspace / Path(path).name).read_text()

    async with openai.AsyncOpenAI(base_url=s.harness.base_url, api_key=s.key,
                                  max_retries=0) as client:
        agent = agents.Agent(
            name="notes reader", instructions="You read files and report what they say.",
            tools=[read_file], model=agents.OpenAIResponsesModel(model, openai_client=client))
        config = agents.RunConfig(tracing_disabled=True)
        try:
            if streamed:
                run = agents.Runner.run_streamed(agent, agent_model.TASK, max_turns=60,
                                                 run_config=config)
                async for _ in run.stream_events():
                    pass
                outcome = Outcome(0, str(run.final_output))
            else:
                result = await agents.Runner.run(agent, agent_model.TASK, max_turns=60,
                                                 run_config=config)
                outcome = Outcome(0, str(result.final_output))
        except Exception as e:  # the run did not finish: reported with every other check
            outcome = Outcome(1, "", output=f"{type(e).__name__}: {e}")
    s.check(outcome)
