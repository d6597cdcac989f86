"""Why a message was not delivered: one vocabulary of reasons and one owner per reason.

Every failure (our SMTP session, a DSN or ARF report, an ESP event) gets a reason of
:data:`REASONS` (sisimai's vocabulary, https://libsisimai.org/en/reason/) whose owner decides the
effect: ``address`` (gone: suppressed), ``sender`` (ours: the mailbox counts the block),
``transient`` (suppressed only after repeated soft bounces), ``none`` (not a failure).
docs/explanation/bounces-and-complaints.md."""

from __future__ import annotations

import re
from typing import Literal

Owner = Literal["address", "sender", "transient", "none"]

REASONS: dict[str, Owner] = {
    # The address is gone.
    "userunknown": "address",    # no such mailbox (5.1.1, "user unknown")
    "hostunknown": "address",    # no such domain or no MX (5.1.2, 5.4.4 on the domain)
    "hasmoved": "address",       # the address moved and left no forward (5.1.6)
    "notaccept": "address",      # the domain accepts no mail (null MX, RFC 7505; 5xx only)
    # The sender (we) was refused.
    "blocked": "sender",         # our IP or domain is on a blocklist, or refused by the host
    "spamdetected": "sender",    # the message was judged spam (5.7.1 "spam")
    "policyviolation": "sender",  # a site policy refused the message (5.7.x policy)
    "authfailure": "sender",     # SPF, DKIM or DMARC failed (5.7.26, 5.7.25 …)
    "requireptr": "sender",      # our sending IP has no PTR record (5.7.25 "reverse DNS")
    "securityerror": "sender",   # TLS or authentication required (5.7.0, 5.7.10)
    "failedstarttls": "sender",  # STARTTLS failed
    "norelaying": "sender",      # the host refused to relay for us (5.7.1 "relay")
    "rejected": "sender",        # the envelope sender was refused (5.1.7, 5.1.8)
    "badreputation": "sender",   # the sender's reputation is too low
    "contenterror": "sender",    # the content or its headers are malformed (5.6.x)
    "virusdetected": "sender",   # the message was judged to carry a virus
    "notcompliantrfc": "sender",  # the message does not follow the RFCs
    "mesgtoobig": "sender",      # the message is larger than the host accepts (5.3.4)
    "filtered": "sender",        # the recipient's filter refused this message
    "syntaxerror": "sender",     # the host did not understand our SMTP command
    # Transient: may work later.
    "mailboxfull": "transient",  # over quota (4.2.2, 5.2.2)
    "exceedlimit": "transient",  # the message exceeds the mailbox's limit (5.2.3)
    "suspend": "transient",      # the mailbox is disabled or suspended for now (5.2.1)
    "expired": "transient",      # delivery time expired in a queue (4.4.7)
    "systemerror": "transient",  # the host had an error (4.3.0)
    "systemfull": "transient",   # the host's disk is full (4.3.1)
    "networkerror": "transient",  # DNS or network failure (4.4.x)
    "toomanyconn": "transient",  # too many connections (4.7.0 "too many")
    "speeding": "transient",     # rate limited (4.7.28, 421 "try again later")
    "mailererror": "transient",  # the host's mailer program failed
    "onhold": "transient",       # the host holds the message
    "delayed": "transient",      # a DSN with Action: delayed
    "undefined": "transient",    # a failure whose reason could not be told
    # Not a failure.
    "delivered": "none",         # a DSN with Action: delivered / relayed / expanded
    "feedback": "none",          # a complaint (ARF, JMRP …): handled as a complaint
    "vacation": "none",          # an auto-reply
}
"""Every reason with its owner (see the module docstring for what each owner causes)."""

# Enhanced status codes (RFC 3463) whose subject and detail alone tell the reason.
_BY_STATUS: dict[str, str] = {
    "5.1.0": "userunknown", "5.1.1": "userunknown", "5.1.2": "hostunknown",
    "5.1.3": "userunknown", "5.1.4": "userunknown", "5.1.6": "hasmoved",
    "5.1.7": "rejected", "5.1.8": "rejected", "5.1.10": "notaccept",
    "5.2.1": "suspend", "5.2.2": "mailboxfull", "5.2.3": "exceedlimit",
    "5.3.4": "mesgtoobig", "5.3.0": "systemerror", "5.3.1": "systemfull",
    "5.4.4": "hostunknown", "5.4.7": "expired", "4.4.7": "expired",
    "5.7.23": "authfailure", "5.7.24": "authfailure", "5.7.25": "requireptr",
    "5.7.26": "authfailure", "5.7.27": "notaccept", "5.7.10": "securityerror",
    "5.7.11": "securityerror", "5.7.28": "speeding", "4.7.28": "speeding",
    "4.2.2": "mailboxfull", "4.3.1": "systemfull", "4.4.1": "networkerror",
    "4.4.2": "networkerror", "4.4.3": "networkerror",
}

# RFC 3463 subjects that tell the owner when neither the status nor the words say more:
# X.3.XXX mail system, X.4.XXX network and routing, X.6.XXX message content, X.7.XXX security or
# policy (never the address: sisimai's tables have no X.7 reason owned by the address).
_BY_SUBJECT: dict[str, str] = {"3": "systemerror", "4": "networkerror", "6": "contenterror",
                               "7": "policyviolation"}

# Statuses that decide whatever the words say; for the others (5.2.1 "User Unknown", 5.0.0 …),
# servers' words are more often right than the code, as sisimai's tables show (issue 23).
_DECISIVE = frozenset({"5.1.1", "5.1.2", "5.1.6", "5.1.7", "5.1.8", "5.1.10", "5.2.3", "5.7.23", "5.7.24", "5.7.25",
                       "5.7.26", "5.7.27", "5.3.4", "5.4.4"})

# Words that decide even over a decisive status: servers answer a rate limit, a full mailbox
# or a resolver failure with 5.1.1 or 5.4.4 too (GoDaddy, qmail, Postfix in sisimai's tables).
_OVERRIDES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.I)) for reason, pattern in (
        ("badreputation", r"due to ip reputation|poor reputation"),
        ("speeding", r"too many recipients this hour|sending rate|rate limit(ed)?\b"),
        ("toomanyconn", r"(ip|connection) frequency limited"),
        ("filtered", r"refused due to recipient preferences"),
        ("toomanyconn", r"too many (connections|concurrent)"),
        ("mailboxfull", r"over ?quota|mailbox (is )?full|quota exceeded"),
        ("networkerror", r"unexpected name server reply|temporary failure in name resolution"),
        # A local delivery program failed (procmail, a pipe: sisimai's X-UNIX), whatever status.
        ("mailererror", r"\bprocmail:|command died with status|\bx-unix;"),
    ))

# Words in the diagnostic that say the reason where the status does not (5.7.1, 5.0.0, 550 …),
# in order: the first that matches decides.
_BY_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.I)) for reason, pattern in (
        # Exchange Online's answer for an unknown user (DBEB), before "access denied" = blocked.
        ("userunknown", r"recipient address rejected: access denied|recipient address rejected\.?\s*$|"
                        r"\(and other recipients in the same domain\)"),
        # "550 : User unknown" (no address before the colon) is how Japanese carriers (au,
        # docomo) answer after DATA when the recipient's domain filter refuses the sender.
        ("suspend", r"recipient account is blocked|account (has been |is )?(locked|blocked)"),
        ("filtered", r"message filtered|rejected by the domain filter|content filter|"
                     r"\b550 ?:( ?:)? ?user unknown|recipient preferences"),
        ("authfailure", r"\bdmarc\b|\bspf\b.*\bfail|\bdkim\b.*\bfail|not authenticated.*(sender|domain)|"
                        r"bad spf|unauthenticated e-?mail from|does not have authentication "
                        r"information|fails? to pass authentication|\bspf (check|record)"),
        ("requireptr", r"reverse (dns|lookup)|\bptr\b|no rdns|hostname does not resolve|"
                       r"mismatches client ip|ip name lookup failed|cannot find your hostname"),
        ("securityerror", r"\btls\b|starttls|encryption required|authentication required|"
                          r"authrequired|unauthenticated senders|smtp authentication|"
                          r"without authentication|must (be )?authenticat"),
        ("norelaying", r"relay(ing)? (access )?(denied|not permitted)|not permitted to relay|"
                       r"not configured to relay|relay through this server|"
                       r"email address is not verified|unable to relay"),
        ("rejected", r"sender address rejected|after mail from|in reply to mail from|"
                     r"sender (address )?(is )?(invalid|unknown|not allowed|denied)|"
                     r"domain of sender address|sender was rejected|sender rejected|not a member of this "
                     r"(mailing )?list|permission to post|'send mail as'|not a registered "
                     r"gateway user|from: domain is invalid|purported responsible address|"
                     r"my name was rejected"),
        ("badreputation", r"user complaints|ip reputation|(bad|poor|low) reputation"),
        ("virusdetected", r"\bvirus"),
        ("blocked", r"block ?list|black ?list|\bdnsbl\b|\brbl\b|spamhaus|barracuda|spamcop|"
                    r"(?<!not )listed (at|in|on)|\bblocked\b|access denied|banned sending ip|invalid ip "
                    r"for sending|client host rejected|not accepting connections|service "
                    r"refused|refused to talk to me|\(bl\)|weren'?t sent|daily relay quota|"
                    r"remote protocol error"),
        ("spamdetected", r"\bspam\b|junk mail|unsolicited|\bube\b|content rejected|mail rejete"),
        ("notcompliantrfc", r"multiple addresses in from|duplicate header|not rfc ?\d* ?compliant"),
        ("contenterror", r"improper use of 8-bit|8-bit data|header error|malformed (message|header)"),
        ("mesgtoobig", r"line limit exceeded|message (size|is too (big|large))|too large|"
                       r"exceeds (the )?(maximum )?size"),
        ("policyviolation", r"protocol violation|security polic|host network not allowed"),
        ("syntaxerror", r"command parameter not implemented|improper sequence of commands|"
                        r"malformed address|syntax error|command not recognized"),
        ("expired", r"envelope expired|still undelivered after|undeliverable for \d+|"
                    r"in the queue too long|retry time(out)? (not )?(exceeded|reached)|"
                    r"message expired|could not be delivered for \d+"),
        ("mailboxfull", r"mailbox (is )?full|over ?quota|quota exceeded|insufficient storage|"
                        r"disk quota|not enough disk space|mailbox (size|storage) (limit )?exceeded|box is full|"
                        r"メールボックスが一杯|exceeded (the )?storage"),
        ("suspend", r"(account|mailbox) (is )?(disabled|suspended|inactive|deactivated)|"
                    r"disabled recipient|temporar(y|ily) locked"),
        ("rejected", r"sender address rejected|after mail from|sender (address )?(is )?(invalid|"
                     r"unknown|not allowed|denied)|domain of sender address"),
        ("networkerror", r"temporary failure in name resolution|host not found, try again|"
                         r"unexpected name server reply"),
        ("notaccept", r"not accepting (network )?messages|null mx|no mx (record )?found|"
                      r"no smtp service|doesn'?t receive e?-?mail|does not accept mail"),
        ("hostunknown", r"host (or domain name )?(not found|unknown)|domain (does )?not exist|"
                        r"no such domain|unrouteable address|domain is not reachable|"
                        r"dns lookup failure|name or service not known|unknown host|"
                        r"domain (name )?not found|\bnxdomain\b|"
                        r"(?<![@\w.-])[a-z0-9-]+(\.[a-z0-9-]+)+ does not exist"),
        ("userunknown", r"user ?unknown|unknown user|no such (user|mailbox|recipient|address|"
                        r"account)|(mailbox|recipient|address|user|account)( address| name)? "
                        r"(is )?(unavailable|not found|does not exist|doesn'?t exist|"
                        r"invalid|unknown|couldn'?t be found|wasn.t found|not valid)|"
                        r"invalid (final delivery )?(recipient|user ?id|address|mailbox)|"
                        r"unknown (recipient|mailbox|address)|not our customer|"
                        r"account (does not|doesn'?t) exist|doesn'?t have an? [\w.-]+ account|"
                        r"not listed in (the )?(public )?name|no valid recipients?|"
                        r"(user|recipient|addressee) (not found|not exist|doesn'?t exist)|"
                        r"address (couldn'?t|could not) be found|no mailbox here|"
                        r"mailbox not (found|available)|is not a valid (mailbox|user)|"
                        r"there is no one at this address|destination address (is )?invalid|"
                        r"recipient name is not recognized|not listed in (the )?domino directory|"
                        r"please check if (the )?address is correct|"
                        r"account that you tried to reach does not exist"),
        # Last: a queue that gave up ("Deferred: Connection timed out", Sendmail's final notice)
        # says less than any reason above.
        ("expired", r"deferred: connection timed out|cannot send message for \d+ days?"),
        ("policyviolation", r"\bpolicy\b"),
    ))

# Words for an unknown user that an MTA writes only when it looked the user up itself (sisimai's
# Lhost modules set "userunknown" on them), so they prove the address gone at any SMTP stage;
# a gateway's bare "No such user" / "User unknown" does not (see outreach.dsn, "filtered").
_OWN_LOOKUP = re.compile("|".join((
    r"recipient name is not recognized",                # Exchange 2003
    r"not listed in (the )?(public name|domino directory)",  # Lotus Notes / Domino
    r"invalid final delivery userid|unknown user: ",    # Ipswitch IMail
    r"no valid recipients for this mm",                 # Verizon's MMS gateway
    r"\(and other recipients in the same domain\)",     # Trend Micro, Exchange Online DBEB
    r"recipient address rejected(: access denied|\.?\s*$)",  # Exchange Online DBEB
    r"address couldn'?t be found|wasn.t found at the destination domain",  # Microsoft 365
    r"delivery error: dd ",                             # Yahoo's own MTA
    r"mail\.local: unknown user",                       # Sendmail's local delivery agent
    r"requested action not taken: mailbox unavailable \(",  # Outlook.com's coded reply
)), re.I | re.M)

_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")


def owner_of(reason: str) -> Owner:
    """The owner of ``reason`` (a key of :data:`REASONS`); ``"transient"`` for one not there."""
    return REASONS.get(reason, "transient")


def looked_up_by_the_mta(diagnostic: str | None) -> bool:
    """Whether ``diagnostic`` carries an MTA's own unknown-user words (:data:`_OWN_LOOKUP`):
    proof that the address is gone even when no status or SMTP stage says so (sisimai's
    Lhost modules for Exchange 2003, Domino, IMail, Verizon, Trend Micro, Microsoft, Yahoo)."""
    return bool(_OWN_LOOKUP.search(diagnostic or ""))


def status_in(text: str | None) -> str | None:
    """The first RFC 3463 enhanced status code (``"5.1.1"``) in ``text``, or ``None``."""
    m = _STATUS.search(text or "")
    return ".".join(m.groups()) if m else None


def reason_of(status: str | None, diagnostic: str | None = None, code: int | None = None) -> str:
    """The reason (a key of :data:`REASONS`) for one failed recipient.

    Decisive status, else the diagnostic's words, else the status's reason, its subject, then
    ``undefined`` (5xx, transient) or ``delayed`` (4xx): the order and corrections are
    docs/explanation/inbound-classification.md#from-the-servers-words-to-a-reason-and-an-owner.

    :param status: the RFC 3463 enhanced status (``"5.7.26"``); ``None``: looked for in the text.
    :param diagnostic: the server's text (an SMTP reply, a ``Diagnostic-Code``, a bounce's words).
    :param code: the basic SMTP reply code (``550``), when known."""
    status = status or status_in(diagnostic)
    for reason, pattern in _OVERRIDES:
        if pattern.search(diagnostic or ""):
            return reason
    if status in _BY_STATUS and status in _DECISIVE:
        return _BY_STATUS[status]
    temporary = (status or "").startswith("4") or (code is not None and 400 <= code <= 499)
    for reason, pattern in _BY_TEXT:
        if pattern.search(diagnostic or ""):
            # A 4xx "domain not found" is a resolver failing for now, not a domain gone; a 4xx
            # "accepts no mail" likewise may change (sisimai: a soft bounce).
            if temporary and reason == "hostunknown":
                return "networkerror"
            return "systemerror" if temporary and reason == "notaccept" else reason
    if status in _BY_STATUS:
        reason = _BY_STATUS[status]
        if reason == "notaccept" and status.startswith("4"):
            return "systemerror"
        return reason
    if status:  # the class's subject (RFC 3463 §3): content, routing and system say that much
        subject = status.split(".")[1]
        if subject in _BY_SUBJECT:
            return _BY_SUBJECT[subject]
    permanent = (status or "").startswith("5") or (code is not None and 500 <= code <= 599)
    return "undefined" if permanent else "delayed"
