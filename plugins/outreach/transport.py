"""SMTP transport that knows at which stage an outcome happened (RFC 5321); it never touches the database.

Accepted only by a 2xx to the end of DATA; a failure before is *not accepted* (safe to retry), a
missing reply after it *ambiguous* (never retried). ``smtplib.SMTP.data`` sends and reads in one
call, so the low-level steps are used."""

from __future__ import annotations

import enum
import re
import smtplib
from collections.abc import Callable
from dataclasses import dataclass

from outreach import failpoints
from outreach.logutil import mask, mask_addresses


class Outcome(enum.Enum):
    """How one handoff ended."""

    ACCEPTED = "accepted"    # 2xx to the end of DATA
    RETRY = "retry"          # not accepted, temporary (4xx, connection trouble before end of data)
    PERMANENT = "permanent"  # 5xx at any stage (a 530 at MAIL is the session's: session_refusal)
    AMBIGUOUS = "ambiguous"  # end of data sent, no reply: may or may not have been accepted


class Stage(enum.Enum):
    """The SMTP stage an outcome belongs to."""

    CONNECT = "CONNECT"          # TCP, greeting, EHLO, STARTTLS, AUTH
    MAIL = "MAIL"
    RCPT = "RCPT"
    DATA = "DATA"                # the DATA command, before the 354 go-ahead
    BODY = "BODY"                # sending the content, up to and including <CRLF>.<CRLF>
    END_OF_DATA = "END_OF_DATA"  # the reply to the end of data


@dataclass(frozen=True)
class Delivery:
    """The outcome of one handoff: ``outcome``, ``stage``, SMTP ``code`` (``None`` when no reply)
    and ``reply`` text (or the error)."""

    outcome: Outcome
    stage: Stage
    code: int | None
    reply: str

    def describe(self) -> str:
        """Return ``"RCPT 550 5.1.1 no such user"``-style text for logs and last_error."""
        code = f" {self.code}" if self.code is not None else ""
        return f"{self.stage.value}{code} {self.reply}".strip()

_AUTH_TEXT = re.compile(r"(?i)\bauth")
_TLS_TEXT = re.compile(r"(?i)starttls|\btls\b")


def session_refusal(delivery: Delivery) -> str | None:
    """Return why the server refused this *session* at MAIL FROM, in words, or ``None``.

    ``"the server requires authentication"`` or ``"… STARTTLS"``: a reply at stage ``MAIL`` only,
    code 530 (RFC 4954 §6, RFC 3207 §4, Microsoft's 530 5.7.57) or a 5xx 5.7.0 (RFC 3463 §3.8) whose
    text says "auth…". A 5.7.1 policy rejection stays the message's permanent failure. The one rule
    (docs/howto/operating-failures.md), narrow on purpose.

    :param delivery: what :meth:`SmtpSession.deliver` returned."""
    if delivery.stage is not Stage.MAIL or delivery.code is None:
        return None
    enhanced_500 = re.search(r"\b5\.7\.0\b", delivery.reply) is not None
    if delivery.code == 530 or (500 <= delivery.code <= 599 and enhanced_500
                                and _AUTH_TEXT.search(delivery.reply)):
        if _TLS_TEXT.search(delivery.reply) and not _AUTH_TEXT.search(delivery.reply):
            return "the server requires STARTTLS"
        return "the server requires authentication"
    return None


@dataclass(frozen=True)
class RelayCapabilities:
    """What a relay said it can carry in its EHLO reply: ``smtputf8`` (RFC 6531: non-ASCII
    addresses and UTF-8 headers) and ``size`` (RFC 1870 SIZE: the largest message in bytes it
    takes; ``None`` when it names none, 0 counts as none)."""

    smtputf8: bool
    size: int | None

    @classmethod
    def of(cls, client: smtplib.SMTP) -> RelayCapabilities:
        """Read them from a connected client after EHLO (``ehlo_or_helo_if_needed``); a relay
        that only answered HELO offers neither."""
        raw = (client.esmtp_features.get("size") or "").strip() if client.does_esmtp else ""
        size = int(raw) if raw.isdigit() and int(raw) > 0 else None
        return cls(bool(client.does_esmtp and client.has_extn("smtputf8")), size)


def needs_smtputf8(*addresses: str) -> bool:
    """Whether an envelope with ``addresses`` (as they go into MAIL FROM / RCPT TO: domains
    already IDNA-encoded) needs SMTPUTF8 (RFC 6531 §3.4): a local part that is not ASCII."""
    return not all(a.isascii() for a in addresses)


def relay_cannot_carry(client: smtplib.SMTP, payload: bytes, sender: str, recipient: str) -> str | None:
    """The one rule on what a relay cannot carry, or ``None`` when it can.

    A non-ASCII address without SMTPUTF8 (RFC 6531 §3.4), or a message over the advertised SIZE (RFC
    1870 §6): every attempt would fail alike, so the caller fails the row permanently at once.
    docs/reference/relay-capabilities.md.

    :param client: connected, after EHLO.
    :param payload: the message bytes as they would go out (before dot-stuffing).
    :returns: a one-line reason naming the relay's limit (never a full address)."""
    caps = RelayCapabilities.of(client)
    if needs_smtputf8(sender, recipient) and not caps.smtputf8:
        which = "recipient" if not recipient.isascii() else "sender"
        address = mask(recipient if which == "recipient" else sender)
        return (f"the relay does not offer SMTPUTF8 (RFC 6531), so it cannot carry the non-ASCII "
                f"{which} address {address}; failed permanently, not retried (send it through a "
                "relay that offers SMTPUTF8)")
    if caps.size is not None and len(payload) > caps.size:
        return (f"the message is {len(payload):,} bytes, larger than the relay's SIZE limit of "
                f"{caps.size:,} bytes (RFC 1870); failed permanently, not retried")
    return None


def _text(resp: bytes | str) -> str:
    """One line of reply text, at most 500 characters, with any quoted address masked (it goes
    to logs and ``last_error``)."""
    if isinstance(resp, bytes):
        resp = resp.decode("utf-8", "replace")
    return mask_addresses(" ".join(resp.split()))[:500]


def _classify(stage: Stage, code: int, resp: bytes | str) -> Delivery:
    if 500 <= code <= 599:
        return Delivery(Outcome.PERMANENT, stage, code, _text(resp))
    return Delivery(Outcome.RETRY, stage, code, _text(resp))


def dot_stuff(data: bytes) -> bytes:
    """Return the DATA payload: CRLF line ends, leading dots doubled, ending in CRLF.CRLF."""
    data = re.sub(rb"(?:\r\n|\n|\r(?!\n))", b"\r\n", data)
    data = re.sub(rb"(?m)^\.", b"..", data)
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data + b".\r\n"


class SmtpSession:
    """One SMTP session for a batch, opened lazily and re-opened after a broken connection.

    :param connect: returns a connected, greeted (and authenticated) ``smtplib.SMTP``; in Airflow
        this comes from the SMTP provider's hook for the mailbox's connection.
    :param timeout: seconds any reply may take once connected (``None``: the connection's own).
    """

    def __init__(self, connect: Callable[[], smtplib.SMTP], timeout: float | None = None) -> None:
        self._connect = connect
        self._timeout = timeout
        self._client: smtplib.SMTP | None = None

    def _drop(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - closing a broken socket must never raise
                pass
        self._client = None

    def _reset(self, delivery: Delivery) -> Delivery:
        """After a refused command, RSET the transaction; a 421 or failed RSET drops the link."""
        if delivery.code == 421 or self._client is None:
            self._drop()
            return delivery
        try:
            self._client.rset()
        except (smtplib.SMTPException, OSError):
            self._drop()
        return delivery

    def open(self) -> Delivery | None:
        """Connect (greeting, EHLO, STARTTLS, AUTH: whatever ``connect`` does) unless connected.

        A failure here is the session's, not a message's: rows may be released uncounted.

        :returns: ``None`` when connected; else a not-accepted :class:`Delivery` at stage ``CONNECT``
            naming the error. Never raises for SMTP or socket errors."""
        if self._client is not None:
            return None
        try:
            self._client = self._connect()
            if self._timeout and self._client.sock is not None:
                # Every later reply waits at most the validated timeout (Settings.smtp_timeout).
                self._client.timeout = self._timeout
                self._client.sock.settimeout(self._timeout)
            self._client.ehlo_or_helo_if_needed()
        except Exception as exc:  # noqa: BLE001 - refused, reset, TLS, AUTH, hook errors
            self._drop()
            return Delivery(Outcome.RETRY, Stage.CONNECT, getattr(exc, "smtp_code", None),
                            _text(f"{type(exc).__name__}: {exc}"))
        return None

    def deliver(self, payload: bytes, sender: str, recipient: str,
                on_body: Callable[[], None] | None = None) -> Delivery:
        """Hand one message to the server and classify what happened.

        :param payload: the message bytes (see :func:`outreach.message.to_wire`).
        :param sender: envelope sender (MAIL FROM).
        :param recipient: the one envelope recipient (RCPT TO).
        :param on_body: called after the 354 go-ahead, right before the message body is sent
            (from then on, until a reply is read, the outcome would be ambiguous).
        :returns: a :class:`Delivery`; this method does not raise for SMTP or socket errors.
        """
        failed = self.open()
        if failed is not None:
            return failed
        client = self._client
        assert client is not None  # open() returned no failure: connected
        cannot = relay_cannot_carry(client, payload, sender, recipient)
        if cannot is not None:  # nothing was sent: the session stays usable for the next row
            return Delivery(Outcome.PERMANENT, Stage.MAIL, None, cannot)
        stage = Stage.MAIL
        try:
            options = ["SMTPUTF8"] if not (sender + recipient).isascii() else []
            code, resp = client.mail(sender, options)
            if code != 250:
                return self._reset(_classify(stage, code, resp))
            stage = Stage.RCPT
            code, resp = client.rcpt(recipient)
            if code not in (250, 251):
                return self._reset(_classify(stage, code, resp))
            stage = Stage.DATA
            client.putcmd("data")
            code, resp = client.getreply()
            if code != 354:
                return self._reset(_classify(stage, code, resp))
            stage = Stage.BODY
            if on_body is not None:
                on_body()
            failpoints.hit("before_body")
            client.send(dot_stuff(payload))
        except (smtplib.SMTPException, OSError) as exc:
            # Nothing after the end of data was sent yet: the server cannot have accepted it.
            self._drop()
            return Delivery(Outcome.RETRY, stage, getattr(exc, "smtp_code", None),
                            _text(str(exc) or type(exc).__name__))
        failpoints.hit("after_end_of_data")
        try:
            code, resp = client.getreply()
        except (smtplib.SMTPException, OSError) as exc:
            # The end of data went out and no reply came: the server may have accepted it.
            self._drop()
            return Delivery(Outcome.AMBIGUOUS, Stage.END_OF_DATA, None,
                            "no reply after the end of DATA: " + _text(str(exc) or type(exc).__name__))
        if 200 <= code <= 299:
            return Delivery(Outcome.ACCEPTED, Stage.END_OF_DATA, code, _text(resp))
        if not 400 <= code <= 599:
            # An unparseable (smtplib: -1) or out-of-protocol reply to the end of DATA: the server
            # may have taken the message, so it is never retried automatically.
            self._drop()
            return Delivery(Outcome.AMBIGUOUS, Stage.END_OF_DATA, code,
                            "unexpected reply to the end of DATA: " + _text(resp))
        if code == 421:
            self._drop()
        return _classify(Stage.END_OF_DATA, code, resp)

    def close(self) -> None:
        """QUIT politely, or just close."""
        if self._client is not None:
            try:
                self._client.quit()
            except (smtplib.SMTPException, OSError):
                pass
        self._drop()
