"""OpenAI's chat completions (``POST /v1/chat/completions``): the stages' own shape, so no
adapter; a whole answer must be a chat completion (``proxy.upstream.answers``), its usage is
``usage.prompt_tokens``, ``prompt_tokens_details.cached_tokens`` and ``cache_write_tokens``,
``completion_tokens``. Its summary calls are chat
completions (``proxy.context.summary.summarizer``)."""

from __future__ import annotations

from proxy.apis.api import Api, openai_headers
from proxy.upstream.usage import chat_usage

API = Api(name="chat", route="/v1/chat/completions", path="/chat/completions",
          headers=openai_headers, usage=chat_usage, usage_marker=b'"prompt_tokens"',
          stream_end=(b"[DONE]",))
