"""litellm's model map read as a file (``proxy.upstream.model_map``), once, without importing
litellm."""

from __future__ import annotations

import subprocess
import sys

from proxy.upstream import model_map


def test_the_map_has_context_windows_of_known_models() -> None:
    data = model_map.model_map()
    assert data["gpt-4o"]["max_input_tokens"] == 128_000
    assert model_map.model_map() is data  # read once


def test_reading_the_map_does_not_import_litellm() -> None:
    code = ("import sys; from proxy.upstream.model_map import model_map; "
            "assert model_map(); print('litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
