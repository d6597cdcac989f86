"""Test sends: a campaign step, rendered for a chosen or sample lead, sent to seed addresses.

A real send through the lead's mailbox, built by the sender's builder, to each seed instead of
the lead (``lead.email`` and To are the seed's; its own Message-ID; an unsubscribe link for
email id 0). It changes no enrolment, queue row or lead, is recorded in ``outreach.test_sends``
and counts toward the daily cap (0102, under ``mailbox_lock``). docs/howto/launch-a-campaign.md."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from outreach import db
from outreach.addresses import normalize_address
from outreach.compose import DkimKeyLoader
from outreach.handoff import SmtpConnector
from outreach.logutil import log, mask
from outreach.message import envelope_address
from outreach.preview import PreviewError, build_row
from outreach.settings import Settings
from outreach.store import Conn, mailboxes, test_sends
from outreach.store import campaigns as campaigns_store
from outreach.suppression import is_suppressed
from outreach.transport import Outcome, SmtpSession


class TestSendRefused(RuntimeError):
    """A test send could not start: the mailbox is paused or its daily limit is reached, or its
    DKIM key could not be loaded (the message says which and what to do)."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class TestSendResult:
    """One seed's outcome: ``recipient`` (the seed), ``sent`` (the server accepted it),
    ``message_id``, ``reply`` (the server's reply, or why it was not sent)."""

    __test__ = False  # not a pytest class
    recipient: str
    sent: bool
    message_id: str | None
    reply: str


def send_to_seeds(url: str, key: str, recipients: Sequence[str], settings: Settings,
              connector: SmtpConnector, *, actor: str, lead: str | None = None, step: int = 1,
              dkim_keys: DkimKeyLoader | None = None, now: dt.datetime | None = None,
              ) -> list[TestSendResult]:
    """Send step ``step`` of campaign ``key``, rendered for ``lead`` (default the first enrolled), to
    each of ``recipients`` through the lead's mailbox; any campaign state, a draft included.

    A suppressed seed is never sent to; one the server refuses is reported, not retried.

    :param actor: who sends it (recorded; the CLI passes the OS user).
    :param dkim_keys: loads the mailbox's DKIM key (required when it has a DKIM selector).
    :param now: the Date header and ``accepted_at`` (UTC; default now).
    :raises PreviewError: no such campaign, step or enrolled lead.
    :raises TestSendRefused: the mailbox is paused, at its daily limit, or its DKIM key fails.
    :raises ValueError: a seed address is not a valid address."""
    seeds = [normalize_address(r) for r in recipients]
    clock = now or dt.datetime.now(dt.UTC)
    results: list[TestSendResult] = []
    with db.connect(url, autocommit=True) as conn:
        if campaigns_store.campaign_find(conn, key=key) is None:
            raise PreviewError(f"no campaign {key!r} (the key of a synced campaign file)")
        rows = [asdict(r) for r in campaigns_store.campaign_preview_rows(
            conn, key=key, step=step, address=lead, limit=1)]
        if not rows:
            raise PreviewError(f"campaign {key}: no step {step}, or no enrolled lead"
                               + (f" {lead!r}" if lead else ""))
        base = rows[0]
        key_pem = None
        if base["dkim_selector"]:
            try:
                if dkim_keys is None:
                    raise LookupError("no DKIM key loader")
                key_pem = dkim_keys(base["dkim_key_conn_id"])
            except Exception as exc:  # noqa: BLE001 - a missing connection, a bad secret
                raise TestSendRefused(f"cannot load the DKIM key from connection "
                                      f"{base['dkim_key_conn_id']!r}: {type(exc).__name__}; nothing "
                                      "is sent unsigned") from None
        session = SmtpSession(lambda: connector(base["smtp_conn_id"]), settings.smtp_timeout)
        try:
            for seed in seeds:
                results.append(_send_seed(conn, session, base, seed, settings, clock, key_pem,
                                          actor, now))
        finally:
            session.close()
    sent = sum(r.sent for r in results)
    log.info("test send campaign=%s step=%s sent=%s not_sent=%s", key, step, sent,
             len(results) - sent)
    return results


def _send_seed(conn: Conn, session: SmtpSession, base: dict[str, Any], seed: str,
               settings: Settings, clock: dt.datetime, key_pem: bytes | None, actor: str,
               now: dt.datetime | None) -> TestSendResult:
    if is_suppressed(conn, seed):
        return TestSendResult(seed, False, None, "suppressed: never sent (outreach.is_suppressed)")
    # id 0: an unsubscribe link that unsubscribes nobody; a new message, never a reply in a thread.
    row = {**base, "id": 0, "idempotency_key": uuid.uuid4(), "email": seed, "step_thread": False}
    message_id, wire, _ = build_row(conn, row, settings, clock, key_pem)
    mailbox_id = int(base["mailbox_id"])
    with conn.transaction():
        locked = mailboxes.mailbox_lock(conn, mailbox_id=mailbox_id)
        if locked is None or locked.status != "active":
            raise TestSendRefused(f"mailbox {mailbox_id} is paused: resume it first "
                                  "(outreach mailbox resume)")
        quota = mailboxes.mailbox_remaining_today(conn, mailbox_id=mailbox_id, now=now,
                                                  interval=None, gap_seconds=0, horizon=None,
                                                  gap_jitter=0)
        if quota.used >= quota.daily_limit:
            raise TestSendRefused(f"mailbox {mailbox_id}: daily limit reached "
                                  f"({quota.used}/{quota.daily_limit}); a test send counts "
                                  "toward it: try tomorrow or raise daily_cap")
        failed = session.open()
        if failed is not None:
            return TestSendResult(seed, False, None, failed.describe())
        delivery = session.deliver(wire, envelope_address(base["mailbox_address"]),
                                   envelope_address(seed))
        if delivery.outcome is not Outcome.ACCEPTED:
            log.error("test send to %s not accepted: %s", mask(seed), delivery.describe())
            return TestSendResult(seed, False, message_id, delivery.describe())
        reply = f"{delivery.code} {delivery.reply}"
        test_sends.test_send_record(conn, step_id=int(base["step_id"]),
                                    lead_id=int(base["lead_id"]), mailbox_id=mailbox_id,
                                    recipient=seed, message_id=message_id, smtp_reply=reply,
                                    actor=actor, now=now)
    return TestSendResult(seed, True, message_id, reply)
