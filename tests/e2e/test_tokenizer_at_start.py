"""A started proxy loads the tokenizer of models it has never seen before any request, so the
first request of an unknown model does not wait for it."""

from __future__ import annotations

import time
from typing import Any


def test_a_started_proxy_loads_the_tokenizer_of_unknown_models_before_any_request(
        make_harness: Any) -> None:
    counter = make_harness().state.context.counter
    for _ in range(400):  # loaded in a thread at start-up: a bound, not a timing check
        if counter.is_loaded("a-model-nobody-knows"):
            return
        time.sleep(0.05)
    raise AssertionError("the default encoding was not loaded at start-up")
