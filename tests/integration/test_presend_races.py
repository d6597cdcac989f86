"""The race between the pre-send check and the handoff: an opt-out or a stop that commits after a
row's pre-send check but before its handoff stamp (while the SMTP session is being opened) must
still keep the message from going out. Real PostgreSQL, the real CLI for the operator's action,
messages counted at a real aiosmtpd server."""

from __future__ import annotations

import subprocess

from outreach.airflow.connections import smtp_connector
from outreach.queue import queue_due
from outreach.send import send_batch
from support import invariants
from support.flow import cli_env, import_demo, outreach_cmd, rows

CAMPAIGN_KEY = "q4-ops-intro"


def _first_claimed(db_url: str) -> str:
    # The batch's first row: its pre-send check ran right before the session was opened.
    return rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE e.status = 'sending'"
                        " ORDER BY e.scheduled_for, e.id LIMIT 1")[0]["email"]


def _cli(env: dict[str, str], *args: str) -> None:
    p = subprocess.run(outreach_cmd(*args), env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_unsubscribe_while_the_first_row_connects_is_not_sent(db_url, sink, settings, tmp_path):
    env = cli_env(db_url, sink)
    import_demo(db_url)
    queue_due(db_url)
    victims: list[str] = []

    def connector(conn_id: str):
        # session.open(): after the first row's pre-send check, before its handoff stamp.
        victims.append(_first_claimed(db_url))
        _cli(env, "suppress", victims[0], "--reason", "unsubscribed", "--source", "test")
        return smtp_connector(conn_id)

    summary = send_batch(db_url, 1, 20, connector, settings)
    assert victims and victims[0] not in {m["X-RcptTo"] for m in sink.messages()}
    assert (summary.claimed, summary.sent, summary.suppressed) == (20, 19, 1)
    assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s", (victims[0],)) == [{"s": "suppressed"}]
    invariants.assert_ok(db_url, sink.messages())


def test_lead_stop_while_the_first_row_connects_is_not_sent(db_url, sink, settings, tmp_path):
    env = cli_env(db_url, sink)
    import_demo(db_url)
    queue_due(db_url)
    victims: list[str] = []

    def connector(conn_id: str):
        victims.append(_first_claimed(db_url))
        _cli(env, "lead", "stop", victims[0], "--campaign", CAMPAIGN_KEY, "--by", "Dana",
             "--reason", "replied by phone")
        return smtp_connector(conn_id)

    summary = send_batch(db_url, 1, 20, connector, settings)
    assert victims and victims[0] not in {m["X-RcptTo"] for m in sink.messages()}
    assert (summary.claimed, summary.sent, summary.cancelled) == (20, 19, 1)
    assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s", (victims[0],)) == [{"s": "cancelled"}]
    invariants.assert_ok(db_url, sink.messages())
