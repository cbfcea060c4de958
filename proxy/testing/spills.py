"""Where a planted fact is, seen from the request the upstream received: in its text, or in
the original of a spill it names (a masked output's placeholder, or a summary's list of the
outputs it did not read), read through ``GET /v1/conversations/{id}/spills/{spill_id}`` with
the conversation's own key. The demo, the tests and the session-cost bench all ask this.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

SPILL_REF = re.compile(r"spill ([0-9a-f]{16})")  # as a placeholder shows a spill id


def spilled(base_url: str, key: str, conversation: str, sent: str
            ) -> Iterator[tuple[str, str]]:
    """(spill id, original text) of every spill ``sent`` names, once each, in order
    (``base_url`` ends in ``/v1``; loopback only)."""
    for sid in dict.fromkeys(SPILL_REF.findall(sent)):
        req = urllib.request.Request(f"{base_url}/conversations/{conversation}/spills/{sid}",
                                     headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            yield sid, resp.read().decode()


def fact_spill(base_url: str, key: str, conversation: str, sent: str, fact: str
               ) -> str | None:
    """Where ``fact`` is: ``""`` in ``sent`` itself, a spill id when in that spill's original,
    ``None`` when in neither (lost). Stops at the first spill that holds it."""
    if fact in sent:
        return ""
    return next((sid for sid, text in spilled(base_url, key, conversation, sent)
                 if fact in text), None)
