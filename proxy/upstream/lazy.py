"""litellm, imported once and only when needed (it takes seconds).

The import always sets ``LITELLM_LOCAL_MODEL_COST_MAP`` first, so litellm never fetches its model
map from the network. Import it from the event loop's thread (or before the loop starts), never
from a worker thread: CPython 3.11's compiler state is not thread-safe, and an import racing
another thread's ``compile`` can fail with ``SystemError``.
"""

from __future__ import annotations

import os
from typing import Any

_litellm: Any = None


def litellm() -> Any:
    """The litellm module (imported on first call; blocking)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm as module

        module.telemetry = False
        module.suppress_debug_info = True
        _litellm = module
    return _litellm


def loaded() -> bool:
    return _litellm is not None


async def shutdown() -> None:
    """Stop litellm's background logging task on this loop, if litellm started one; left alone
    it outlives the application as a pending task."""
    if _litellm is None:
        return
    try:
        from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

        await GLOBAL_LOGGING_WORKER.stop()
    except Exception:  # an internal of litellm's: its absence must not break shutdown
        pass
