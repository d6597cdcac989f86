"""A real DNS server on loopback (dnslib) serving a zone the test writes, and test DKIM keys.

No network: the preflight and DKIM tests ask this server only.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from dnslib import MX, PTR, QTYPE, RCODE, RR, TXT, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from outreach.dev.devsmtp import free_port


def txt(name: str, value: str) -> RR:
    """A TXT record; values longer than 255 bytes are split into strings (RFC 7208 §3.3)."""
    data = value.encode()
    return RR(name, QTYPE.TXT, rdata=TXT([data[i:i + 255] for i in range(0, len(data), 255)]), ttl=60)


def a(name: str, ip: str) -> RR:
    return RR(name, QTYPE.A, rdata=A(ip), ttl=60)


def mx(name: str, host: str, preference: int = 10) -> RR:
    return RR(name, QTYPE.MX, rdata=MX(host, preference), ttl=60)


def ptr(ip: str, name: str) -> RR:
    return RR(ipaddress.ip_address(ip).reverse_pointer, QTYPE.PTR, rdata=PTR(name), ttl=60)


class _Zone(BaseResolver):
    def __init__(self, records: list[RR]) -> None:
        self.records = records

    def resolve(self, request, handler):
        reply = request.reply()
        qname, qtype = request.q.qname, request.q.qtype
        known = False
        for rr in self.records:
            if rr.rname == qname:
                known = True
                if rr.rtype == qtype:
                    reply.add_answer(rr)
        if not known:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


@contextmanager
def dns_server(records: list[RR]) -> Iterator[str]:
    """Serve ``records`` over UDP on 127.0.0.1 and a free port; yield ``"127.0.0.1:PORT"``."""
    port = free_port()
    quiet = DNSLogger("-recv,-send,-request,-reply,-truncated,-error,-data", prefix=False)
    server = DNSServer(_Zone(records), address="127.0.0.1", port=port, logger=quiet)
    server.start_thread()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop()


@functools.cache
def rsa_key(bits: int = 2048, label: str = "a") -> bytes:
    """A fresh RSA private key (PKCS#8 PEM) per ``(bits, label)``, made once per test session."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def good_zone(domain: str, selector: str, key_pem: bytes, sending_ip: str) -> list[RR]:
    """A zone that passes every preflight check for ``domain`` sending from ``sending_ip``."""
    from outreach.signing import public_key_record

    host = f"smtp.{domain}"
    return [
        txt(domain, f"v=spf1 mx ip4:{sending_ip}/32 include:_spf.provider.example -all"),
        txt("_spf.provider.example", "v=spf1 ip4:198.51.100.0/24 -all"),
        txt(f"{selector}._domainkey.{domain}", public_key_record(key_pem)),
        txt(f"_dmarc.{domain}", "v=DMARC1; p=quarantine; rua=mailto:dmarc@" + domain),
        mx(domain, host),
        a(host, sending_ip),
        ptr(sending_ip, host),
    ]
