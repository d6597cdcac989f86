"""Test scenarios built with the real product functions: a one-mailbox campaign from generated
files, and an SMTP server on loopback that refuses some recipients at RCPT (a hard bounce)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox

from outreach.dev.devsmtp import MaildirServer
from outreach.leads import import_leads
from outreach.queue import queue_due

ADDRESS = "pace@mail.outreach-test.example"
DOMAIN = "mail.outreach-test.example"
CONN_ID = "outreach_smtp_anna"  # the sink fixture points this Airflow connection at its server


def one_mailbox_campaign(url: str, tmp_path: Path, *, leads: int, bounces: int = 0,
                         daily_cap: int = 50, timezone: str = "Europe/Berlin",
                         window: tuple[str, str] = ("09:00", "17:00"),
                         warmup_start: str | None = None, now: dt.datetime | None = None) -> int:
    """Import ``leads`` leads (the first ``bounces`` of them addresses that the
    :class:`BouncingServer` refuses) into a one-step campaign of one mailbox (cap, time zone,
    optional warm-up start date), queue them at ``now`` and return the mailbox id."""
    (tmp_path / "mailboxes.yaml").write_text(
        f"mailboxes:\n  - address: {ADDRESS}\n    name: Pace Tester\n    smtp_conn_id: {CONN_ID}\n"
        f"    timezone: {timezone}\n    daily_cap: {daily_cap}\n"
        + (f"    warmup_start: {warmup_start}\n" if warmup_start else ""))
    (tmp_path / "campaign.yaml").write_text(
        f"key: pacing-test\nname: Pacing test\nstatus: active\ntimezone: {timezone}\n"
        f"send_window:\n  days: [mon, tue, wed, thu, fri, sat, sun]\n"
        f"  start: \"{window[0]}\"\n  end: \"{window[1]}\"\n"
        f"mailboxes:\n  - {ADDRESS}\n"
        "steps:\n  - template: ops_intro\n    subject: \"Hello {{ lead.company }}\"\n    delay_days: 0\n")
    lines = ["Email,First Name,Last Name,Company Name"]
    for i in range(leads):
        local = f"nobody{i:04d}" if i < bounces else f"lead{i:04d}"
        lines.append(f"{local}@acme{i % 7}.example,Lee{i},Test,Acme {i % 7}")
    (tmp_path / "leads.csv").write_text("\n".join(lines) + "\n")
    result = import_leads(url, tmp_path / "campaign.yaml", tmp_path / "mailboxes.yaml",
                          tmp_path / "leads.csv", now=now)
    assert result.imported == leads, result.summary()
    assert queue_due(url, now=now)["queued"] == leads
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT id FROM outreach.mailboxes WHERE address = %s",
                            (ADDRESS,)).fetchone()[0]


class _Refusing(Mailbox):
    """Stores accepted mail in a Maildir; refuses ``nobody…`` recipients: 550 5.1.1."""

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("nobody"):
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 OK"


class BouncingServer(MaildirServer):
    """A real aiosmtpd server on loopback that hard-bounces ``nobody…`` recipients at RCPT."""

    def __init__(self, maildir: Path) -> None:
        super().__init__(maildir)
        self._controller = Controller(_Refusing(self.maildir), hostname=self.host, port=self.port,
                                      enable_SMTPUTF8=True)


def concurrently(target: Callable[..., object], args: Sequence[tuple]) -> None:
    """Run ``target(*a)`` for every ``a`` of ``args`` in its own thread, all released at once
    (a barrier); re-raise the first error any of them raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(args))

    def run(*a: object) -> None:
        try:
            barrier.wait()
            target(*a)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def claim_until_drained(db_url: str, senders: Sequence[int], *, now: dt.datetime, batch: int,
                        rounds: int, **policy: object) -> None:
    """One sender per entry of ``senders`` (a mailbox id; the same one twice is two senders of
    it), all released at once (:func:`concurrently`): each claims up to ``batch`` rows of its
    mailbox at ``now`` with the contact-policy keywords ``policy`` (:func:`outreach.claim.claim`),
    at most ``rounds`` times, until a claim takes nothing and no row of the mailbox is due."""
    from outreach import db
    from outreach.claim import claim

    def run(box: int) -> None:
        with db.connect(db_url, autocommit=True) as conn:
            for _ in range(rounds):
                got, _note = claim(conn, box, batch, worker=f"w{box}", now=now, **policy)
                due = conn.execute(
                    "SELECT count(*) AS n FROM outreach.emails WHERE mailbox_id = %s AND"
                    " status = 'queued' AND scheduled_for <= %s", (box, now)).fetchone()["n"]
                if not got and not due:
                    return

    concurrently(run, [(box,) for box in senders])
