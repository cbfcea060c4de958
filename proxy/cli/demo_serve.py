"""``context-proxy demo --serve``: after the demo session, the proxy and its fake upstream stay up
for the newcomer's own client, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import TextIO


def try_lines(base_url: str, key: str) -> str:
    """What to paste: the base URL, the key, a curl line and the same in the ``openai`` SDK."""
    body = json.dumps({"model": "demo-agent",
                       "messages": [{"role": "user", "content": "Hello, proxy"}]})
    return (f"\nThe proxy and its fake upstream keep running (Ctrl-C to stop).\n"
            f"  base_url: {base_url}\n"
            f"  api key:  {key}\n\n"
            f"Try it:\n"
            f"  curl -s {base_url}/chat/completions -H 'Authorization: Bearer {key}' "
            f"-H 'Content-Type: application/json' -d '{body}'\n\n"
            f"  {sys.executable} -c \"import openai; c = openai.OpenAI(base_url='{base_url}', "
            f"api_key='{key}'); print(c.chat.completions.create(model='demo-agent', "
            f"messages=[{{'role': 'user', 'content': 'Hello'}}]).choices[0].message.content)\"\n"
            f"\n  The demo conversation's dividers: curl -s {base_url}/conversations/"
            f"demo-session/dividers -H 'Authorization: Bearer {key}'\n")


def keep_serving(out: TextIO, base_url: str, key: str) -> None:
    """Print how to reach the proxy, then block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    out.write(try_lines(base_url, key))
    out.flush()
    stop.wait()
    out.write("stopped\n")
