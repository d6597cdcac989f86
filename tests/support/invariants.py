"""The invariant checker: compares what the SMTP server accepted with the database.

Used by every end-to-end and fault test. It checks that no Message-ID was accepted twice, that no
(recipient, step) was accepted twice, that every accepted message has a 'sent' or 'unconfirmed'
row, that every sent row has exactly one send-log entry whose Message-ID the server accepted (unless
an operator confirmed it from Sent Items), and
that the counts add up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from email.message import Message

import psycopg
from psycopg.rows import dict_row


@dataclass
class Totals:
    """What the checker counted; ``problems`` is empty when every invariant holds."""

    accepted: int = 0
    sent_rows: int = 0
    send_log: int = 0
    unconfirmed: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _mid(msg: Message) -> str:
    return (msg["Message-ID"] or "").strip().strip("<>")


def check(url: str, messages: list[Message], *, allow_unconfirmed_accepted: bool = True) -> Totals:
    """Check the invariants; return :class:`Totals` (``problems`` lists every violation)."""
    t = Totals(accepted=len(messages))
    mids = Counter(_mid(m) for m in messages)
    for mid, n in mids.items():
        if n > 1:
            t.problems.append(f"Message-ID {mid} accepted {n} times")
    # (recipient, campaign step) once; transactional mail is checked by its Message-ID (one per
    # delivery key): one recipient may get several welcome emails of different keys.
    pairs = Counter(((m["X-RcptTo"] or m["To"] or "").lower(), m["X-Outreach-Step"]) for m in messages
                    if not (m["X-Outreach-Step"] or "").startswith("transactional/"))
    for pair, n in pairs.items():
        if n > 1:
            t.problems.append(f"recipient+step {pair} accepted {n} times")
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT e.id, e.status::text AS status, e.failure_kind, e.idempotency_key::text AS key,"
            " (SELECT count(*) FROM outreach.send_log s WHERE s.email_id = e.id) AS logs,"
            " (SELECT s.message_id FROM outreach.send_log s WHERE s.email_id = e.id) AS message_id,"
            " (SELECT s.source FROM outreach.send_log s WHERE s.email_id = e.id) AS source"
            " FROM outreach.emails e").fetchall()
        t.send_log = conn.execute("SELECT count(*) AS n FROM outreach.send_log").fetchone()["n"]
    t.by_status = dict(Counter(r["status"] for r in rows))
    by_key = {r["key"]: r for r in rows}
    for mid in mids:
        key = mid.split("@", 1)[0]
        row = by_key.get(key)
        if row is None:
            t.problems.append(f"accepted Message-ID {mid} has no email row")
        elif row["status"] != "sent" and not (allow_unconfirmed_accepted
                                               and row["failure_kind"] == "unconfirmed"):
            t.problems.append(f"accepted Message-ID {mid} but email {row['id']} is {row['status']}"
                              f"/{row['failure_kind']}")
    for r in rows:
        if r["status"] == "sent":
            t.sent_rows += 1
            if r["logs"] != 1:
                t.problems.append(f"sent email {r['id']} has {r['logs']} send-log entries")
            elif r["message_id"] not in mids and r["source"] != "operator":
                t.problems.append(f"sent email {r['id']} ({r['message_id']}) was not accepted by the server")
        elif r["logs"]:
            t.problems.append(f"email {r['id']} is {r['status']} but has a send-log entry")
        if r["failure_kind"] == "unconfirmed":
            t.unconfirmed += 1
        if r["status"] == "sending":
            t.problems.append(f"email {r['id']} is still 'sending'")
    if t.send_log != t.sent_rows:
        t.problems.append(f"send_log has {t.send_log} entries for {t.sent_rows} sent rows")
    return t


def assert_ok(url: str, messages: list[Message], **kw) -> Totals:
    """Run :func:`check` and fail with every problem listed."""
    t = check(url, messages, **kw)
    assert not t.problems, "invariants violated:\n" + "\n".join(t.problems[:50])
    return t
