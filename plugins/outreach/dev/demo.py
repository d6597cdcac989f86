"""``make demo``: the main job on the shipped sample data, through real Airflow.

Embedded PostgreSQL (unless ``OUTREACH_DATABASE_URL``), migrations, a local SMTP server writing
``.outreach/maildir``, then import, queue and send with ``airflow dags test`` and a report; a
second run sends nothing new. With Dovecot (else it says so), a reply, a DSN and a mailto
unsubscribe with fixed Message-IDs are appended and read by ``outreach_inbox``.
docs/tutorial/first-campaign.md."""

from __future__ import annotations

import email.utils
import os
import secrets
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from outreach import db
from outreach.dev import embedded
from outreach.dev.devsmtp import MaildirServer, read_maildir
from outreach.dev.localairflow import airflow_env, ensure_metadata, run_dag
from outreach.logutil import mask
from outreach.migrate import upgrade
from outreach.paths import project_root, state_dir
from outreach.settings import DatabaseSettings
from outreach.store import emails as emails_store
from outreach.store import import_runs as import_runs_store
from outreach.store import inbound as inbound_store
from outreach.store import reports as reports_store
from outreach.store._run import Conn

DEMO_PUBLIC_URL = "https://unsubscribe.outreach-demo.example"
LEADS_FILE = "include/data/sample_leads.csv"


def demo_secret(state: Path) -> str:
    """Return the demo's unsubscribe secret: ``OUTREACH_UNSUBSCRIBE_SECRET`` or a random one
    kept in ``.outreach/unsubscribe_secret`` (never in the repository)."""
    if os.environ.get("OUTREACH_UNSUBSCRIBE_SECRET"):
        return os.environ["OUTREACH_UNSUBSCRIBE_SECRET"]
    path = state / "unsubscribe_secret"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _counts(url: str) -> dict[str, Any]:
    with db.connect(url, autocommit=True) as conn:
        per_mailbox = {r.address: r.n for r in reports_store.report_sent_per_mailbox(conn)}
        status = {r.status: r.n for r in reports_store.report_email_status_counts(conn)}
    return {"per_mailbox": per_mailbox, "emails": sum(status.values()), "status": status}


def run_demo() -> int:
    """Run the demo; return 0 on success, 1 when a DAG run failed (its log is named)."""
    root, state = project_root(), state_dir()
    url = embedded.local_database_url()
    where = ("OUTREACH_DATABASE_URL" if DatabaseSettings().database_url
             else f"embedded PostgreSQL in {state / 'pgdata'}")
    print(f"outreach demo: database {where}")
    for m in upgrade(url):
        print(f"  applied migration {m.version:04d}_{m.name}")
    maildir = state / "maildir"
    before_files = len(read_maildir(maildir))
    before = _counts(url)
    logs = state / "demo-logs"
    with MaildirServer(maildir) as smtp:
        print(f"  SMTP server (aiosmtpd) on {smtp.host}:{smtp.port}, storing into {maildir}")
        env = airflow_env(root / ".airflow", url,
                          {conn_id: smtp.connection_json() for conn_id in
                           ("outreach_smtp_anna", "outreach_smtp_ben", "outreach_smtp_hello")},
                          {"OUTREACH_PUBLIC_URL": os.environ.get("OUTREACH_PUBLIC_URL", DEMO_PUBLIC_URL),
                           "OUTREACH_UNSUBSCRIBE_SECRET": demo_secret(state),
                           # One run sends the whole sample: no pacing over the day, no
                           # gap between a mailbox's messages.
                           "OUTREACH_SEND_INTERVAL_MINUTES": "0",
                           "OUTREACH_SEND_GAP_SECONDS": "0"})
        print("  Airflow metadata (SQLite) in .airflow/ …", flush=True)
        ensure_metadata(env)
        for dag_id in ("outreach_import_leads", "outreach_queue_due", "outreach_send"):
            print(f"  airflow dags test {dag_id} …", end=" ", flush=True)
            result = run_dag(env, dag_id, logs / f"{dag_id}.log")
            print(result.state)
            if not result.ok:
                print(f"outreach demo: {dag_id} did not succeed (exit {result.returncode}); "
                      f"full Airflow log: {result.log}", file=sys.stderr)
                return 1
        inbound = _inbound_demo(url, env, state, logs)
        if inbound is None:
            return 1
    after = _counts(url)
    messages = read_maildir(maildir)
    with db.connect(url, autocommit=True) as conn:
        latest = import_runs_store.import_run_latest(conn, kind="leads")
        imp = asdict(latest) if latest is not None else None
    print()
    print("=" * 72)
    print(f"Leads ({LEADS_FILE}): {imp['rows_total']} rows")
    print(f"  imported {imp['imported']}, updated {imp['updated']}, duplicate {imp['duplicate']}, "
          f"invalid {imp['invalid']}, suppressed {imp['suppressed']}, newly enrolled {imp['enrolled']}"
          + (f"; already known and unchanged {imp['unchanged']}" if imp["unchanged"] else ""))
    for p in imp["problems"]:
        if p["reason"] != "suppressed" and not p["reason"].startswith("duplicate"):
            print(f"    invalid: line {p['line']}, field {p['field']}: {p['reason']}")
    dups = [p for p in imp["problems"] if p["reason"].startswith("duplicate")]
    for p in dups:
        print(f"    duplicate: line {p['line']}: {p['reason']}")
    sup = [p["line"] for p in imp["problems"] if p["reason"] == "suppressed"]
    if sup:
        print(f"    suppressed (do-not-contact list, or unsubscribed or bounced since): lines {sup}")
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(after["status"].items())) or "none"
    print(f"Emails queued this run: {after['emails'] - before['emails']} "
          f"(all emails so far: {statuses})")
    sent_now = {a: n - before["per_mailbox"].get(a, 0) for a, n in after["per_mailbox"].items()}
    print(f"Sent this run: {sum(sent_now.values())}")
    for address, n in sorted(sent_now.items()):
        print(f"  {mask(address)}: {n} this run, {after['per_mailbox'][address]} in total")
    new_files = len(messages) - before_files
    print(f"Maildir: {len(messages)} messages in {maildir} ({new_files} new this run)")
    if new_files == 0 and sum(sent_now.values()) == 0:
        print("Nothing new was sent: every due email had already gone out "
              "(step 2 becomes due 3 days after step 1).")
    print(*inbound, sep="\n")
    print(f"Airflow logs of this run: {logs}")
    if not DatabaseSettings().database_url:
        print(f"Look at it again: {embedded.OPT_IN}=1 .venv/bin/outreach report "
              "(the embedded PostgreSQL is used only when asked for)")
    print("=" * 72)
    return 0


def _demo_mail(sender: str, to: str, subject: str, message_id: str, body: str,
               headers: dict[str, str] | None = None,
               content_type: str = "text/plain; charset=utf-8") -> str:
    """A message as a mail client or an MTA writes it (CRLF line ends)."""
    head = {"From": sender, "To": to, "Subject": subject, "Date": email.utils.formatdate(),
            "Message-ID": f"<{message_id}>", "MIME-Version": "1.0", "Content-Type": content_type,
            **(headers or {})}
    return "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n" + body


def _demo_dsn(mailbox: str, lead: str, our_message_id: str, message_id: str) -> str:
    """A DSN (RFC 3464) as Postfix writes one: Status 5.1.1, the original's headers enclosed."""
    domain = mailbox.rpartition("@")[2]
    body = "\r\n".join([
        "--dsn", "Content-Type: text/plain", "",
        "I'm sorry to have to inform you that your message could not be delivered.", "",
        f"<{lead}>: host mx.example said: 550 5.1.1 User unknown", "",
        "--dsn", "Content-Type: message/delivery-status", "",
        f"Reporting-MTA: dns; mx.{domain}", "",
        f"Final-Recipient: rfc822; {lead}", "Action: failed", "Status: 5.1.1",
        "Diagnostic-Code: smtp; 550 5.1.1 User unknown", "",
        "--dsn", "Content-Type: text/rfc822-headers", "",
        f"From: <{mailbox}>", f"To: <{lead}>", f"Message-ID: <{our_message_id}>", "",
        "--dsn--", ""])
    return _demo_mail(f"Mail Delivery System <MAILER-DAEMON@mx.{domain}>", mailbox,
                      "Undelivered Mail Returned to Sender", message_id, body,
                      {"Auto-Submitted": "auto-replied"},
                      'multipart/report; report-type=delivery-status; boundary="dsn"')


def _inbound_demo(url: str, env: dict[str, str], state: Path, logs: Path) -> list[str] | None:
    """Deliver a reply, a bounce and a mailto unsubscribe into a local Dovecot by IMAP APPEND and
    run ``outreach_inbox``; return the report's lines (``None`` when the DAG failed). Without
    Dovecot, one line saying that this was skipped and how to install it."""
    from outreach.dev.devimap import INSTALL_HINT, DovecotServer, DovecotUnavailable, dovecot_binary
    from outreach.tokens import make_token

    if dovecot_binary() is None:
        return [f"Inbound mail: SKIPPED - Dovecot is not installed, so the demo could not show the "
                f"inbox reader ({INSTALL_HINT})."]
    with db.connect(url, autocommit=True) as conn:
        sample = [asdict(r) for r in emails_store.email_sent_sample(conn, n=3)]
    if len(sample) < 3:
        return ["Inbound mail: skipped (fewer than three emails were sent)."]
    try:
        imap = DovecotServer().start()
    except DovecotUnavailable as exc:
        return [f"Inbound mail: SKIPPED - {exc}"]
    try:
        for conn_id, login in (("outreach_imap_anna", "anna"), ("outreach_imap_ben", "ben"),
                               ("outreach_imap_unsubscribe", "unsubscribe")):
            imap.add_user(login)
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = imap.connection_json(login)
        inbox_of = {"anna.schmidt@mail.outreach-demo.example": "anna",
                    "ben.okafor@mail.outreach-demo.example": "ben"}
        reply, bounce, unsub = sample
        imap.append(inbox_of.get(reply["mailbox_address"], "anna"), _demo_mail(
            reply["email"], reply["mailbox_address"], "Re: your email",
            f"demo-reply-{reply['id']}@lead.example",
            "Interested - call me on Tuesday.\r\n\r\n> (your email)\r\n",
            {"In-Reply-To": f"<{reply['message_id']}>"}))
        imap.append(inbox_of.get(bounce["mailbox_address"], "anna"), _demo_dsn(
            bounce["mailbox_address"], bounce["email"], bounce["message_id"],
            f"demo-bounce-{bounce['id']}@mx.example"))
        token = make_token(demo_secret(state), unsub["id"])
        domain = unsub["mailbox_address"].rpartition("@")[2]
        imap.append("unsubscribe", _demo_mail(unsub["email"], f"unsubscribe@{domain}",
                    f"unsubscribe {token}", f"demo-unsubscribe-{unsub['id']}@lead.example", ""))
        print(f"  Dovecot (IMAP) on {imap.host}:{imap.port}: a reply, a bounce and an unsubscribe "
              "delivered by IMAP APPEND", flush=True)
        print("  airflow dags test outreach_inbox …", end=" ", flush=True)
        result = run_dag(env, "outreach_inbox", logs / "outreach_inbox.log")
        print(result.state)
        if not result.ok:
            print(f"outreach demo: outreach_inbox did not succeed (exit {result.returncode}); "
                  f"full Airflow log: {result.log}", file=sys.stderr)
            return None
    finally:
        imap.stop()
    with db.connect(url, autocommit=True) as conn:
        return inbound_report(conn)


def inbound_report(conn: Conn) -> list[str]:
    """The demo report's inbound lines: a count, then one line per recorded inbound message
    (its class, the lead's masked address, the effect applied), oldest first."""
    effects = inbound_store.inbound_effect_list(conn)
    lines = [f"Inbound mail (outreach_inbox): {len(effects)} message(s) recorded in "
             "outreach.inbound_messages"]
    lines += [f"  {e.class_} ({mask(e.address)}): {e.effect}" for e in effects]
    return lines
