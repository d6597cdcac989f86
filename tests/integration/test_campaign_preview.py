"""``outreach campaign preview`` (issue 24): the message a preview prints is the one the SMTP
server receives for that lead, byte for byte apart from Date and DKIM-Signature; the leads a step
would skip are named with the reason. Real PostgreSQL, real aiosmtpd on loopback."""

from __future__ import annotations

import datetime as dt
import re

import psycopg
import pytest

from outreach import db
from outreach.dev.devsmtp import LoopbackSMTPServer
from outreach.preview import PreviewError, preview
from outreach.queue import queue_due
from outreach.suppression import suppress
from support.flow import import_demo, scalar, send_all
from support.paths import SMTP_CONN_IDS


class RawCapture:
    """An aiosmtpd handler that keeps every message's bytes exactly as received (DATA)."""

    def __init__(self) -> None:
        self.received: dict[str, bytes] = {}

    async def handle_DATA(self, server, session, envelope):
        self.received[envelope.rcpt_tos[0]] = envelope.original_content
        return "250 OK"


@pytest.fixture
def raw_sink(monkeypatch):
    handler = RawCapture()
    server = LoopbackSMTPServer(handler).start()
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", server.connection_json())
    yield handler
    server.stop()


def _without(wire: bytes, *names: bytes) -> bytes:
    """The message without the named header fields (with their folded continuation lines)."""
    head, _, body = wire.partition(b"\r\n\r\n")
    fields = re.split(rb"\r\n(?![ \t])", head)
    kept = [f for f in fields if f.split(b":", 1)[0].lower() not in names]
    return b"\r\n".join(kept) + b"\r\n\r\n" + body


def test_preview_is_what_the_server_receives(db_url, raw_sink, settings):
    """Built for the moment of the handoff, the preview is the message byte for byte but for
    the DKIM-Signature (the Date, and the unsubscribe token, time-stamped with it, are the
    moment's)."""
    import_demo(db_url)
    queue_due(db_url)
    # A whole second after queue-due (the rows are due by then): the Date has whole seconds.
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).replace(microsecond=0)
    shown = {i.address: i for i in preview(db_url, "q4-ops-intro", settings, sample=5, now=at)}
    assert len(shown) == 5 and all(i.wire for i in shown.values())
    send_all(db_url, settings, now=at)
    for address, item in shown.items():
        got = _without(raw_sink.received[address], b"dkim-signature")
        assert b"List-Unsubscribe: <https://unsubscribe.test.example/" in item.wire
        assert f"Message-ID: <{item.message_id}>".encode() in got
        assert got == item.wire


def test_preview_of_a_draft_names_placeholders_and_skips(db_url, settings):
    import_demo(db_url)
    with psycopg.connect(db_url) as conn:
        first, second, third = (r[0] for r in conn.execute(
            "SELECT l.email FROM outreach.leads l JOIN outreach.enrollments en "
            "ON en.lead_id = l.id ORDER BY l.id LIMIT 3"))
        conn.execute("UPDATE outreach.leads SET company = '' WHERE email = %s", (second,))
    with db.connect(db_url) as conn:
        suppress(conn, third, "unsubscribed", "test")
        conn.commit()
    items = preview(db_url, "q4-ops-intro", settings, sample=3)
    assert [i.skip for i in items] == [None, "missing required field(s): company",
                                       "suppressed (outreach.is_suppressed)"]
    assert items[0].message_id.startswith("00000000-0000-0000-0000-000000000000@")
    assert any("placeholders" in n for n in items[0].notes)
    assert preview(db_url, "q4-ops-intro", settings, address=first.upper())[0].address == first
    with pytest.raises(PreviewError, match="no enrolled lead 'nobody@x.example'"):
        preview(db_url, "q4-ops-intro", settings, address="nobody@x.example")
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 0
