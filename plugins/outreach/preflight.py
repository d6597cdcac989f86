"""DNS preflight of a sending domain, with dnspython: what Gmail and Yahoo check before they accept
bulk mail, checked before we send.

SPF (RFC 7208), DKIM (RFC 6376), DMARC (RFC 7489 §6.6.3, the organisational domain from the
bundled Public Suffix List), alignment (§3.1), MX (RFC 5321 §5.1, RFC 7505) and PTR (Gmail),
each PASS / WARN / FAIL; and each active relay's SMTPUTF8 and SIZE (:func:`check_relays`). A
lookup that fails is a WARN ("cannot tell"), never a PASS. Each check: docs/howto/dkim-and-dns.md."""

from __future__ import annotations

import base64
import functools
import ipaddress
import re
import smtplib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.resolver
import dns.reversename

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"

RULE_SPF = "Gmail/Yahoo: SPF or DKIM for every sender, SPF and DKIM for bulk senders"
RULE_DKIM = ("Gmail/Yahoo: DKIM for bulk senders; RFC 8058 §4: the signature covers the "
             "one-click headers")
RULE_DMARC = "Gmail/Yahoo bulk senders: a DMARC record, at least p=none"
RULE_ALIGN = "Gmail/Yahoo bulk senders: From domain aligned with SPF or DKIM (DMARC)"
RULE_MX = "RFC 5321 §5.1: the From domain must take replies, bounces and mailto: unsubscribes"
RULE_PTR = "Gmail, every sender: valid forward and reverse DNS (PTR) for the sending IP"

_SPF_LOOKUP_LIMIT = 10  # RFC 7208 §4.6.4


class LookupFailed(Exception):
    """A DNS lookup failed for another reason than "no such name/record" (timeout, SERVFAIL)."""


@dataclass(frozen=True)
class Check:
    """One check: ``name``, ``status`` (PASS/WARN/FAIL), ``detail`` and the ``rule`` it serves."""

    name: str
    status: str
    detail: str
    rule: str

    def line(self) -> str:
        """Return ``"PASS  SPF        detail  [rule]"``."""
        return f"{self.status:<5} {self.name:<10} {self.detail}  [{self.rule}]"


@dataclass
class Report:
    """All checks of one domain (and selector)."""

    domain: str
    selector: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether any check is FAIL."""
        return any(c.status == FAIL for c in self.checks)

    def status(self, name: str) -> str | None:
        """Return the status of the check called ``name`` (``None`` if it did not run)."""
        return next((c.status for c in self.checks if c.name == name), None)

    def text(self) -> str:
        """Return the report as lines of text, the verdict last."""
        head = f"preflight {self.domain}" + (f" (DKIM selector {self.selector})" if self.selector else "")
        verdict = "FAIL: fix the checks marked FAIL before sending" if self.failed else "no FAIL"
        return "\n".join([head, *("  " + c.line() for c in self.checks), verdict])


def make_resolver(nameserver: str | None = None, timeout: float = 3.0) -> dns.resolver.Resolver:
    """Return a resolver: the system's, or only ``nameserver`` (``"127.0.0.1:5353"``,
    ``"[::1]:53"`` or ``"10.0.0.2"``).

    :param timeout: seconds a whole lookup may take (``lifetime``).
    :raises ValueError: ``nameserver`` is not ``IP`` or ``IP:PORT``.
    """
    if nameserver:
        m = re.fullmatch(r"\[?([0-9a-fA-F:.]+?)\]?(?::(\d+))?", nameserver.strip())
        if not m or (nameserver.count(":") > 1 and not nameserver.startswith("[") and m.group(2)):
            raise ValueError(f"nameserver must be IP or IP:PORT, got {nameserver!r}")
        ip = str(ipaddress.ip_address(m.group(1)))
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [ip]
        resolver.port = int(m.group(2) or 53)
    else:
        resolver = dns.resolver.Resolver()
    resolver.lifetime = timeout
    resolver.timeout = timeout
    return resolver


class _Dns:
    """Lookups that return ``[]`` for "no such name / no such record" and raise
    :class:`LookupFailed` for anything else. After a timeout, later lookups fail at once instead
    of waiting again (a send run without DNS is held up once, not once per lookup)."""

    def __init__(self, resolver: dns.resolver.Resolver) -> None:
        self.resolver = resolver
        self.unreachable: str | None = None

    def query(self, name: str, rdtype: str) -> list:
        return self.query_ttl(name, rdtype)[0]

    def query_ttl(self, name: str, rdtype: str) -> tuple[list, int | None]:
        """Return the records and their TTL in seconds (``([], None)``: no such name or record).

        :raises LookupFailed: any other failure (timeout, SERVFAIL, …).
        """
        if self.unreachable:
            raise LookupFailed(f"{rdtype} {name}: skipped, {self.unreachable}")
        try:
            answer = self.resolver.resolve(name, rdtype, search=False)
            return list(answer), answer.rrset.ttl if answer.rrset is not None else None
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return [], None
        except dns.exception.DNSException as exc:
            if isinstance(exc, dns.exception.Timeout):
                self.unreachable = f"DNS unreachable ({type(exc).__name__})"
            raise LookupFailed(f"{rdtype} {name}: {type(exc).__name__}") from None

    def txt(self, name: str) -> list[str]:
        return [b"".join(r.strings).decode("utf-8", "replace") for r in self.query(name, "TXT")]

    def addresses(self, name: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(r.address) for t in ("A", "AAAA") for r in self.query(name, t)]


def _tags(record: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in record.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip().lower()] = "".join(value.split())
    return out


# --- SPF ---------------------------------------------------------------------------------------

_TERM = re.compile(r"^([+\-~?]?)([a-z0-9]+)(?:([:=/])(.*))?$", re.IGNORECASE)
_HOST_CIDR = re.compile(r"^(?P<target>[^/]*)(?:/(?P<c4>\d+))?(?://(?P<c6>\d+))?$")
_DESIGNATING = {"include", "a", "mx", "ip4", "ip6", "exists", "ptr"}


class _Unknown(Exception):
    """SPF evaluation cannot tell (a macro, ``exists``, ``ptr``, a failed lookup)."""


class _SpfEval:
    """A small RFC 7208 evaluator for one IP: enough to tell whether a record authorises it."""

    def __init__(self, resolver: _Dns, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        self.dns = resolver
        self.ip = ip
        self.lookups = 0

    def _count(self) -> None:
        self.lookups += 1
        if self.lookups > _SPF_LOOKUP_LIMIT:
            raise _Unknown("more than 10 DNS lookups (RFC 7208 §4.6.4: permerror)")

    def _record(self, domain: str) -> str | None:
        try:
            records = [t for t in self.dns.txt(domain) if t.lower().startswith("v=spf1")]
        except LookupFailed as exc:
            raise _Unknown(str(exc)) from None
        if len(records) > 1:
            raise _Unknown(f"{domain} has {len(records)} SPF records (permerror)")
        return records[0] if records else None

    def _in(self, hosts: list, cidr: str | None) -> bool:
        for host in hosts:
            if host.version != self.ip.version:
                continue
            prefix = cidr or str(host.max_prefixlen)
            if self.ip in ipaddress.ip_network(f"{host}/{prefix}", strict=False):
                return True
        return False

    def evaluate(self, domain: str) -> str:
        """Return the SPF result for ``domain``: pass, fail, softfail, neutral or none."""
        record = self._record(domain)
        if record is None:
            return "none"
        redirect = None
        for term in record.split()[1:]:
            if "%" in term:
                raise _Unknown(f"macro in {term!r}")
            m = _TERM.match(term)
            if not m:
                raise _Unknown(f"cannot read term {term!r}")
            qualifier, name, sep, arg = m.group(1) or "+", m.group(2).lower(), m.group(3), m.group(4)
            if sep == "/":
                arg = "/" + arg
            if sep == "=":
                if name == "redirect":
                    redirect = arg
                continue
            if self._matches(domain, name, arg):
                return {"+": "pass", "-": "fail", "~": "softfail", "?": "neutral"}[qualifier]
        if redirect:
            self._count()
            return self.evaluate(redirect)
        return "neutral"

    def _matches(self, domain: str, name: str, arg: str | None) -> bool:
        if name == "all":
            return True
        if name in ("ip4", "ip6"):
            try:
                return self.ip in ipaddress.ip_network(arg or "", strict=False)
            except ValueError:
                raise _Unknown(f"bad {name}:{arg}") from None
        if name == "include":
            self._count()
            result = self.evaluate(arg or "")
            if result == "none":
                raise _Unknown(f"include:{arg} has no SPF record (permerror)")
            return result == "pass"
        if name in ("a", "mx"):
            self._count()
            spec = _HOST_CIDR.match(arg or "")
            if not spec:
                raise _Unknown(f"cannot read {name}:{arg}")
            target = spec.group("target") or domain
            cidr = spec.group("c4") if self.ip.version == 4 else spec.group("c6")
            try:
                if name == "a":
                    return self._in(self.dns.addresses(target), cidr)
                hosts = [str(r.exchange).rstrip(".") for r in self.dns.query(target, "MX")]
                return any(self._in(self.dns.addresses(h), cidr) for h in hosts if h)
            except LookupFailed as exc:
                raise _Unknown(str(exc)) from None
        raise _Unknown(f"mechanism {name!r} cannot be evaluated here")


def check_spf(resolver: _Dns, domain: str, sending_ip: str | None) -> Check:
    """Check the SPF record of ``domain`` (and whether it authorises ``sending_ip``)."""
    try:
        records = [t for t in resolver.txt(domain) if t.lower().startswith("v=spf1")]
    except LookupFailed as exc:
        return Check("SPF", WARN, f"cannot tell: {exc}", RULE_SPF)
    if not records:
        return Check("SPF", FAIL, f"no v=spf1 TXT record at {domain}", RULE_SPF)
    if len(records) > 1:
        return Check("SPF", FAIL, f"{len(records)} SPF records at {domain} (RFC 7208 §3.2: "
                     "permerror)", RULE_SPF)
    record = records[0]
    if sending_ip:
        ip = ipaddress.ip_address(sending_ip)
        try:
            result = _SpfEval(resolver, ip).evaluate(domain)
        except _Unknown as exc:
            return Check("SPF", WARN, f"cannot tell whether {ip} is covered: {exc} ({record})",
                         RULE_SPF)
        if result == "pass":
            return Check("SPF", PASS, f"{record!r} authorises {ip}", RULE_SPF)
        return Check("SPF", FAIL, f"{record!r} does not authorise {ip} (result {result})",
                     RULE_SPF)
    terms = [_TERM.match(t) for t in record.split()[1:]]
    designating = [m.group(2).lower() for m in terms
                   if m and m.group(2).lower() in _DESIGNATING and m.group(1) in ("", "+")]
    redirect = any(m and m.group(2).lower() == "redirect" for m in terms)
    if any(m and m.group(2).lower() == "all" and m.group(1) in ("", "+") for m in terms):
        return Check("SPF", WARN, f"{record!r} ends in +all: anyone may send as {domain}", RULE_SPF)
    if designating or redirect:
        return Check("SPF", PASS, f"{record!r} designates senders ({', '.join(designating) or 'redirect'}); "
                     "give --sending-ip to check the sender itself", RULE_SPF)
    return Check("SPF", FAIL, f"{record!r} authorises no sender", RULE_SPF)


# --- DKIM --------------------------------------------------------------------------------------

def _public_key(p: str):
    """Return the public key a ``p=`` value holds, or ``None`` when it holds none."""
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_der_public_key(base64.b64decode(p, validate=True))
    except (ValueError, TypeError):
        return None


def check_dkim(resolver: _Dns, domain: str, selector: str | None,
               expected_p: str | None) -> Check:
    """Check the DKIM key record ``<selector>._domainkey.<domain>``; compare it with
    ``expected_p`` (base64 DER public key of the configured private key) when given."""
    if not selector:
        return Check("DKIM", WARN, "no DKIM selector configured or given (--selector): messages "
                     "are not signed", RULE_DKIM)
    name = f"{selector}._domainkey.{domain}"
    try:
        records = resolver.txt(name)
    except LookupFailed as exc:
        return Check("DKIM", WARN, f"cannot tell: {exc}", RULE_DKIM)
    records = [r for r in records if "p=" in r]
    if not records:
        return Check("DKIM", FAIL, f"no DKIM key record at {name}", RULE_DKIM)
    tags = _tags(records[0])
    p = tags.get("p", "")
    if not p:
        return Check("DKIM", FAIL, f"the key at {name} is revoked (empty p=)", RULE_DKIM)
    if tags.get("k", "rsa").lower() != "rsa":
        return Check("DKIM", WARN, f"{name} has k={tags['k']}; outreach signs with RSA", RULE_DKIM)
    published = _public_key(p)
    if published is None:
        return Check("DKIM", FAIL, f"{name}: p= is not a valid public key", RULE_DKIM)
    if expected_p is not None:
        expected = _public_key(expected_p)
        if expected is not None and expected.public_numbers() == published.public_numbers():
            return Check("DKIM", PASS, f"{name} matches the configured private key", RULE_DKIM)
        return Check("DKIM", FAIL, f"{name} does not match the configured private key (publish "
                     "the record `outreach dkim-record` prints, or fix the selector)", RULE_DKIM)
    return Check("DKIM", PASS, f"{name} has a {published.key_size}-bit key (no private key "
                 "configured to compare)", RULE_DKIM)


# --- DMARC, alignment, MX, PTR -----------------------------------------------------------------

@functools.cache
def _public_suffixes():
    """The Public Suffix List bundled with ``publicsuffixlist`` (read once; no network)."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def organizational_domain(domain: str) -> str:
    """Return the DMARC organisational domain of ``domain`` (RFC 7489 §3.2): its public suffix
    from the Public Suffix List (ICANN and private sections; a TLD the list does not know counts
    as a suffix) plus one more label; ``domain`` itself when it is a public suffix.

    :param domain: an ASCII (IDNA) domain name, no trailing dot.
    """
    return _public_suffixes().privatesuffix(domain.lower()) or domain.lower()


def _dmarc_record(resolver: _Dns, domain: str) -> tuple[str | None, str, int]:
    """Return ``(record, where, count)``: the record at ``_dmarc.<domain>``, else at
    ``_dmarc.<organisational domain>`` when that differs (RFC 7489 §6.6.3 steps 1-3)."""
    names = [f"_dmarc.{domain}"]
    org = organizational_domain(domain)
    if org != domain.lower():
        names.append(f"_dmarc.{org}")
    for name in names:
        records = [t for t in resolver.txt(name) if t.replace(" ", "").lower().startswith("v=dmarc1")]
        if records:
            return records[0], name, len(records)
    return None, names[0], 0


def check_dmarc(resolver: _Dns, domain: str) -> tuple[Check, dict[str, str]]:
    """Check the DMARC record; return the check and its tags (``{}`` when there is none)."""
    try:
        record, where, count = _dmarc_record(resolver, domain)
    except LookupFailed as exc:
        return Check("DMARC", WARN, f"cannot tell: {exc}", RULE_DMARC), {}
    if record is None:
        org = organizational_domain(domain)
        also = f" or _dmarc.{org} (organisational domain)" if org != domain.lower() else ""
        return Check("DMARC", FAIL, f"no v=DMARC1 record at {where}{also}", RULE_DMARC), {}
    if count > 1:
        return Check("DMARC", FAIL, f"{count} DMARC records at {where} (RFC 7489 §6.6.3: none "
                     "applies)", RULE_DMARC), {}
    tags = _tags(record)
    policy = tags.get("p", "").lower()
    if where != f"_dmarc.{domain}" and tags.get("sp"):
        policy = tags["sp"].lower()
    if policy not in ("none", "quarantine", "reject"):
        return Check("DMARC", FAIL, f"{where}: no valid p= in {record!r}", RULE_DMARC), tags
    return Check("DMARC", PASS, f"policy p={policy} ({where}: {record!r})", RULE_DMARC), tags


def check_alignment(domain: str, spf: Check, dkim_check: Check, dmarc_tags: dict[str, str],
                    signing: bool = True) -> Check:
    """From-domain alignment: DKIM ``d=`` and MAIL FROM are the From domain, so each is aligned in
    strict and relaxed mode alike; alignment holds when one of them passes. ``signing`` says
    whether messages are DKIM-signed at all (a selector is configured)."""
    modes = f"adkim={dmarc_tags.get('adkim', 'r')}, aspf={dmarc_tags.get('aspf', 'r')}"
    aligned = [n for n, c in (("DKIM d=" + domain, dkim_check), ("SPF MAIL FROM " + domain, spf))
               if c.status == PASS]
    if aligned:
        return Check("alignment", PASS, f"From {domain} aligned through {' and '.join(aligned)} "
                     f"({modes})", RULE_ALIGN)
    if spf.status == WARN or (signing and dkim_check.status == WARN):
        return Check("alignment", WARN, f"cannot tell: neither SPF nor DKIM passed for {domain}",
                     RULE_ALIGN)
    return Check("alignment", FAIL, f"neither SPF nor DKIM passes for From {domain}: DMARC "
                 "fails", RULE_ALIGN)


def check_mx(resolver: _Dns, domain: str) -> Check:
    """Check that the domain receives mail (MX, or an A fallback)."""
    try:
        mx = resolver.query(domain, "MX")
        if any(str(r.exchange) == "." for r in mx):
            return Check("MX", FAIL, f"{domain} has a null MX (RFC 7505): it accepts no mail",
                         RULE_MX)
        if mx:
            hosts = ", ".join(sorted(str(r.exchange).rstrip(".") for r in mx))
            return Check("MX", PASS, f"{domain} MX {hosts}", RULE_MX)
        if resolver.addresses(domain):
            return Check("MX", WARN, f"{domain} has no MX; mail falls back to its A record",
                         RULE_MX)
    except LookupFailed as exc:
        return Check("MX", WARN, f"cannot tell: {exc}", RULE_MX)
    return Check("MX", FAIL, f"{domain} has no MX and no address: replies, bounces and mailto: "
                 "unsubscribes are lost", RULE_MX)


def check_ptr(resolver: _Dns, sending_ip: str | None) -> Check:
    """Check forward-confirmed reverse DNS of the sending IP."""
    if not sending_ip:
        return Check("PTR", WARN, "skipped: no sending IP given (--sending-ip)", RULE_PTR)
    ip = ipaddress.ip_address(sending_ip)
    try:
        names = [str(r.target).rstrip(".") for r in
                 resolver.query(dns.reversename.from_address(str(ip)).to_text(), "PTR")]
        if not names:
            return Check("PTR", FAIL, f"{ip} has no PTR record", RULE_PTR)
        for name in names:
            if ip in resolver.addresses(name):
                return Check("PTR", PASS, f"{ip} → {name} → {ip}", RULE_PTR)
    except LookupFailed as exc:
        return Check("PTR", WARN, f"cannot tell: {exc}", RULE_PTR)
    return Check("PTR", FAIL, f"{ip} → {', '.join(names)}, which does not resolve back to {ip}",
                 RULE_PTR)


def run_preflight(domain: str, *, selector: str | None = None, sending_ip: str | None = None,
                  dkim_public_key: str | None = None,
                  resolver: dns.resolver.Resolver | None = None) -> Report:
    """Run every check for a sending domain.

    :param domain: the From domain (IDN allowed; checked in its IDNA form).
    :param selector: DKIM selector (``None``: the DKIM check is a WARN).
    :param sending_ip: the sending IP (``None``: PTR is a WARN, SPF only checked for any sender).
    :param dkim_public_key: base64 DER public key of the configured private key, compared.
    :param resolver: a dnspython resolver (:func:`make_resolver`); default the system's.
    :raises ValueError: ``sending_ip`` is not an IP address, or ``domain`` is not a domain."""
    from outreach.message import MessageError, ascii_domain

    if sending_ip:
        ipaddress.ip_address(sending_ip)
    try:
        domain = ascii_domain(domain.strip().rstrip("."))
    except MessageError as exc:
        raise ValueError(str(exc)) from None
    lookups = _Dns(resolver or make_resolver())
    report = Report(domain, selector)
    spf = check_spf(lookups, domain, sending_ip)
    dkim_check = check_dkim(lookups, domain, selector, dkim_public_key)
    dmarc, tags = check_dmarc(lookups, domain)
    report.checks = [spf, dkim_check, dmarc,
                     check_alignment(domain, spf, dkim_check, tags, signing=bool(selector)),
                     check_mx(lookups, domain), check_ptr(lookups, sending_ip)]
    return report


# --- the relays --------------------------------------------------------------------------------

RULE_RELAY = ("RFC 6531 §3.4: a non-ASCII address needs a relay that offers SMTPUTF8; RFC 1870: "
              "no message over the relay's SIZE")


@dataclass(frozen=True)
class RelayCheck:
    """What one mailbox's relay can carry: ``mailbox_id``, the Airflow ``conn_id``, the
    :class:`Check` (``relay``: PASS, or WARN naming what it cannot carry or that it could not be
    asked), ``smtputf8`` and ``size`` (bytes; ``None`` when not advertised or not known) and
    ``cannot_carry`` (queued rows it would fail permanently)."""

    mailbox_id: int
    conn_id: str
    check: Check
    smtputf8: bool | None = None
    size: int | None = None
    cannot_carry: int = 0


RELAY_PROBES = 8
"""Relays asked at the same time by :func:`check_relays` (each its own SMTP session)."""


def _ask_relay(connector: Callable[[str], smtplib.SMTP], conn_id: str) -> Any:
    """EHLO one relay: its :class:`outreach.transport.RelayCapabilities`, or the exception that
    stopped the asking."""
    from outreach.transport import RelayCapabilities

    try:
        client = connector(conn_id)
        try:
            client.ehlo_or_helo_if_needed()
            return RelayCapabilities.of(client)
        finally:
            try:
                client.quit()
            except (smtplib.SMTPException, OSError):
                client.close()
    except Exception as exc:  # noqa: BLE001 - refused, TLS, AUTH, a missing connection
        return exc


def check_relays(url: str, connector: Callable[[str], smtplib.SMTP]) -> list[RelayCheck]:
    """Ask every active mailbox's relay what it can carry (EHLO only) and count the queued rows it
    could not (the rule: :func:`outreach.transport.relay_cannot_carry`).

    Each SMTP connection is asked once, up to :data:`RELAY_PROBES` at the same time, so a run's
    preflight waits for its slowest relay rather than for the sum of them (a relay that does not
    answer holds the plan for its connection's timeout, not every mailbox's).
    No SMTPUTF8 with non-ASCII rows queued, or no answer, is a WARN; SIZE is shown.
    docs/reference/relay-capabilities.md.

    :param connector: opens a logged-in ``smtplib.SMTP`` by Airflow connection id (called from
        several threads at once).
    :returns: one :class:`RelayCheck` per active mailbox, by mailbox id."""
    from concurrent.futures import ThreadPoolExecutor

    from outreach import db
    from outreach.store import emails, mailboxes

    with db.connect(url, autocommit=True) as conn:
        targets = mailboxes.mailbox_preflight_targets(conn)
        needing = {c.mailbox_id: c.rows for c in emails.email_queued_needing_smtputf8(conn)}
    conn_ids = sorted({t.smtp_conn_id for t in targets})
    with ThreadPoolExecutor(max_workers=max(1, min(RELAY_PROBES, len(conn_ids)))) as pool:
        answers = dict(zip(conn_ids, pool.map(lambda c: _ask_relay(connector, c), conn_ids),
                           strict=True))
    out = []
    for t in targets:
        n = needing.get(t.id, 0)
        who = f"relay of mailbox {t.id} (connection {t.smtp_conn_id!r})"
        caps = answers[t.smtp_conn_id]
        if isinstance(caps, Exception):
            out.append(RelayCheck(t.id, t.smtp_conn_id, Check(
                "relay", WARN, f"cannot tell: {who} could not be asked: {type(caps).__name__}: "
                f"{str(caps)[:200]}", RULE_RELAY)))
            continue
        size = f"SIZE {caps.size:,} bytes" if caps.size else "no SIZE limit advertised"
        if not caps.smtputf8 and n:
            check = Check("relay", WARN, f"{who} does not offer SMTPUTF8: {n} queued row(s) with a "
                          "non-ASCII address cannot go through it and will fail permanently "
                          f"(use a relay that offers SMTPUTF8); {size}", RULE_RELAY)
        else:
            utf8 = "offers SMTPUTF8" if caps.smtputf8 else "no SMTPUTF8 (no queued row needs it)"
            check = Check("relay", PASS, f"{who}: {utf8}; {size}", RULE_RELAY)
        out.append(RelayCheck(t.id, t.smtp_conn_id, check, caps.smtputf8, caps.size,
                              n if not caps.smtputf8 else 0))
    return out
