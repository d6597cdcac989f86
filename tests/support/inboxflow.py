"""Helpers for the inbox tests: a sent campaign, the mail a lead (or an MTA) sends back, and a read
of every account — the same functions the DAG and the CLI call."""

from __future__ import annotations

import datetime as dt
import email.utils
import uuid
from pathlib import Path

from outreach.airflow.connections import imap_account
from outreach.inbox import plan_targets, read_target
from outreach.leads import import_leads
from outreach.queue import queue_due
from support.flow import leads_csv, one_mailbox, rows, send_all
from support.paths import CAMPAIGN, DATA, MAILBOXES

ANNA = "anna.schmidt@mail.outreach-demo.example"
UNSUBSCRIBE = "unsubscribe@mail.outreach-demo.example"
IMAP_CONN_IDS = ("outreach_imap_anna", "outreach_imap_ben", "outreach_imap_unsubscribe")
BOUNCES = DATA / "bounces"
# (sample file of flufl.bounce's corpus, the address it bounces, the MTA that wrote it, class)
BOUNCE_SAMPLES = [
    ("postfix_01.txt", "xxxxx@local.ie", "Postfix", "hard_bounce"),
    ("exim_01.txt", "userx@its.example.nl", "Exim", "hard_bounce"),
    ("microsoft_01.txt", "userx@example.COM", "Exchange", "hard_bounce"),
    # "failed permanently" and no reason: undefined, transient (outreach.reasons.reason_of).
    ("simple_17.txt", "userx@example.com", "Gmail", "soft_bounce"),
    ("dsn_11.txt", "joem@example.com", "Sendmail DSN 5.1.1", "hard_bounce"),
    ("simple_28.txt", "userx@example.com", "Gmail delay", "soft_bounce"),
    # Issue 23: a DSN saying "delayed" changes nothing (its recipient is in failures, not addresses).
    ("dsn_05.txt", "userx@example.cz", "DSN 4.4.1 delayed", "delivery_report"),
]


def sent_campaign(db_url: str, tmp_path: Path, settings, addresses: list[str],
                  campaign: Path = CAMPAIGN) -> dict[str, dict]:
    """Import ``addresses`` into the demo campaign on mailbox 1 (anna), send step 1 to the sink;
    return ``{address: {email_id, message_id, lead_id}}``."""
    import_leads(db_url, campaign, MAILBOXES, leads_csv(tmp_path, addresses, name=f"l{uuid.uuid4().hex[:6]}.csv"))
    one_mailbox(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    return {r["email"]: r for r in rows(db_url, """
        SELECT l.email, e.id AS email_id, s.message_id, l.id AS lead_id
        FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id
        JOIN outreach.send_log s ON s.email_id = e.id""")}


def mail(sender: str, subject: str, body: str, *, to: str = ANNA, headers: dict | None = None,
         message_id: str | None = None) -> str:
    """A plain text message as a person's client (or an auto-responder) writes it."""
    head = {"From": sender, "To": to, "Subject": subject,
            "Date": email.utils.formatdate(localtime=False),
            "Message-ID": message_id or f"<{uuid.uuid4().hex}@client.example>",
            "MIME-Version": "1.0", "Content-Type": "text/plain; charset=utf-8", **(headers or {})}
    return "".join(f"{k}: {v}\n" for k, v in head.items()) + "\n" + body


def bounce_sample(name: str, sample_address: str, lead: str, our_message_id: str | None = None) -> str:
    """A real MTA bounce from flufl.bounce's corpus, about ``lead`` instead of its own address
    (and, when given, enclosing our Message-ID instead of its own original's; a sample that kept
    no Message-ID of its original gets ours in its message/rfc822 part or at the end of its
    text). Without ``our_message_id`` it names none of ours: unverified, it changes nothing."""
    import re

    text = (BOUNCES / name).read_text(encoding="latin-1").replace(sample_address, lead)
    head, sep, body = text.partition("\n\n")
    if our_message_id:  # the enclosed original's Message-ID lines (in the body) become ours
        body, n = re.subn(r"(?im)^(\s*Message-ID:\s*)<[^>]+>",
                          lambda m: m.group(1) + f"<{our_message_id}>", body)
        if not n:  # the sample kept no copy of the original: it enclosed only our header lines
            body, n = re.subn(r"(?is)(Content-Type:\s*message/rfc822[^\n]*\n(?:[^\n]+\n)*\n)",
                              lambda m: m.group(1) + f"Message-ID: <{our_message_id}>\n", body,
                              count=1)
        if not n:  # a plain-text bounce: it quotes the original's header
            body += f"\n------ original message ------\nMessage-ID: <{our_message_id}>\n"
    # Each copy is its own message: a fresh Message-ID of the bounce itself (in the top headers).
    head = re.sub(r"(?im)^(Message-ID:\s*)<[^>]+>", lambda m: m.group(1) + f"<{uuid.uuid4().hex}@mta.example>", head)
    return head + sep + body


def arf_report(recipient: str, our_message_id: str) -> str:
    """An ARF feedback report (RFC 5965 §3, the example's layout) about our message."""
    return f"""From: <staff@fbl.example.net>
Date: {email.utils.formatdate()}
Subject: FW: Earn money
To: <abuse@mail.outreach-demo.example>
Message-ID: <{uuid.uuid4().hex}@fbl.example.net>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on {email.utils.formatdate()}.
For more information about this format please see
https://www.rfc-editor.org/rfc/rfc5965.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <{ANNA}>
Original-Rcpt-To: <{recipient}>
Arrival-Date: {email.utils.formatdate()}
Reported-Domain: mail.outreach-demo.example
Source-IP: 192.0.2.1

--part1_13d.2e68ed54_boundary
Content-Type: text/rfc822-headers

From: Anna Schmidt <{ANNA}>
To: <{recipient}>
Subject: Acme and late deliveries
Message-ID: <{our_message_id}>
Date: {email.utils.formatdate()}

--part1_13d.2e68ed54_boundary--
"""


def read_all(db_url: str, secret: str | None = None) -> list:
    """Read every account once; return the summaries (an InboxError propagates)."""
    return [read_target(db_url, t, imap_account, unsubscribe_secret=secret)
            for t in plan_targets(db_url)]


def inbound(db_url: str) -> dict[str, dict]:
    """The recorded inbound messages by Message-ID."""
    return {r["message_id"]: r for r in rows(db_url, "SELECT * FROM outreach.inbound_messages")}


def next_step_recipients(db_url: str, settings, sink) -> set[str]:
    """Run the next queue-due + send (step 2 is due 3 days after step 1); return the addresses
    the SMTP sink received step 2 at."""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5)
    queue_due(db_url, now=later)
    send_all(db_url, settings, now=later)
    return {m["X-RcptTo"] for m in sink.messages() if m["X-Outreach-Step"].endswith("/2")}


def replied_campaign(db_url: str, tmp_path: Path, settings, imap_accounts, lead: str,
                     body: str, others: tuple[str, ...] = ("quiet@reply.example",)) -> dict[str, dict]:
    """Every inbox account created (:data:`IMAP_CONN_IDS`; those adopted kept), step 1 sent to ``lead`` and
    ``others`` (:func:`sent_campaign`), and the lead's reply (``Re: hello``, ``body``, threaded by
    In-Reply-To) appended to Anna's INBOX; return :func:`sent_campaign`'s result."""
    for conn_id in IMAP_CONN_IDS:
        if conn_id not in imap_accounts.logins:  # not adopted (ImapAccounts.adopt)
            imap_accounts.add(conn_id)
    sent = sent_campaign(db_url, tmp_path, settings, [lead, *others])
    imap_accounts.append("outreach_imap_anna", mail(
        f"Rita <{lead}>", "Re: hello", body,
        headers={"In-Reply-To": f"<{sent[lead]['message_id']}>"}))
    return sent
