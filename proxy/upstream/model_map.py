"""litellm's bundled model map, read as data: the file, not the package.

Importing litellm takes seconds and leaves hundreds of thousands of long-lived objects behind;
the proxy needs only ``max_input_tokens`` per model name from the JSON file litellm ships
(``model_prices_and_context_window_backup.json``). It is found without importing litellm, read
once (milliseconds) and never fetched from the network.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

MAP_FILE = "model_prices_and_context_window_backup.json"

_lock = threading.Lock()
_map: dict[str, Any] | None = None


def _read() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")  # locates the package without running it
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / MAP_FILE
        if path.is_file():
            data = orjson.loads(path.read_bytes())
            return data if isinstance(data, dict) else {}
    log.warning("litellm's model map (%s) was not found; windows come from policies and the "
                "upstream only", MAP_FILE)
    return {}


def model_map() -> dict[str, Any]:
    """Model name → litellm's entry for it (``{}`` when litellm is not installed). Blocking on
    the first call only; safe from any thread."""
    global _map
    if _map is None:
        with _lock:
            if _map is None:
                _map = _read()
    return _map
