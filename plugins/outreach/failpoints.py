"""Failpoints: named places where the chaos tests kill the process (SIGKILL), as in FoundationDB
or TiKV. Off unless ``OUTREACH_FAILPOINTS`` is set; then a no-op dictionary lookup elsewhere.

``OUTREACH_FAILPOINTS="after_accept:3"`` kills the process the 3rd time it reaches
``after_accept``. Points: ``claim_before_commit`` (claim statement run, transaction not committed),
``after_claim``, ``after_handoff_stamp`` (the handoff stamp committed, MAIL FROM not sent),
``before_body`` (DATA accepted with 354, body not sent), ``after_end_of_data``
(the end of DATA sent, reply not read), ``after_accept`` (2xx received, send log not written);
for the inbox reader (:mod:`outreach.inbox`): ``inbox_before_commit`` (a message recorded and its
effect applied, the transaction not committed), ``inbox_after_commit`` (committed, next message
not started); for the warehouse export (:mod:`outreach.export`): ``export_after_write`` (a batch
written to the target, the cursor not advanced).
"""

from __future__ import annotations

import os
import signal

POINTS = ("claim_before_commit", "after_claim", "after_handoff_stamp", "before_body",
          "after_end_of_data", "after_accept")
"""The sender's points (the chaos tests cycle through these)."""
INBOX_POINTS = ("inbox_before_commit", "inbox_after_commit")
"""The inbox reader's points."""
EXPORT_POINTS = ("export_after_write",)
"""The warehouse export's points."""


def _parse(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, n = part.partition(":")
        if name not in POINTS + INBOX_POINTS + EXPORT_POINTS:
            raise ValueError(f"OUTREACH_FAILPOINTS: unknown point {name!r}; one of "
                             f"{POINTS + INBOX_POINTS + EXPORT_POINTS}")
        out[name] = int(n or "1")
    return out


_TARGETS = _parse(os.environ.get("OUTREACH_FAILPOINTS", ""))
_HITS: dict[str, int] = {}


def hit(name: str) -> None:
    """Count a pass through failpoint ``name``; SIGKILL this process when its target is reached."""
    if not _TARGETS or name not in _TARGETS:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] == _TARGETS[name]:
        os.kill(os.getpid(), signal.SIGKILL)
