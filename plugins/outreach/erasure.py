"""Erasure on request (issue 27, item 3; GDPR Art. 17): remove one person's personal data
everywhere outreach stores it, and keep them refused forever.

The work is one stored function, ``outreach.erase_person_v1`` (migration 0129, whose header
lists every table it touches), run in one transaction: the lead row stays as a tombstone
(``erased:<id>``) so every foreign key and ``UNIQUE (lead_id, step_id)`` still holds, the email
rows and the send log keep their Message-ID, status and times, and the address becomes a keyed
hash in ``outreach.suppressions`` (HMAC-SHA256 of the normal form under
``OUTREACH_ERASURE_KEY``), which the one suppression rule, ``outreach.is_suppressed``, matches at
import, queueing and the handoff. The key never lives in the database; without it an erasure
fails (:class:`ErasureError`), and once one person was erased every session that decides
suppression needs it (``outreach.db.connect`` passes it). The run is recorded in
``outreach.erasures``: who, when, why and counts per table, never the address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psycopg

from outreach import audit, db
from outreach.addresses import normal_form
from outreach.logutil import log, mask
from outreach.store import erasures as store

KEY_MIN_LENGTH = 32
"""The erasure key's least length in characters (a random 32-character key is 190+ bits)."""


class ErasureError(RuntimeError):
    """The erasure was refused or could not run; the message is one line for the operator
    (never the key, never the full address)."""


@dataclass(frozen=True)
class ErasureResult:
    """What one :func:`erase` did: the ``outreach.erasures`` row and the rows changed per table."""

    erasure_id: int
    address: str  # masked
    counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """The one summary line (address masked; tables with no change left out)."""
        changed = ", ".join(f"{t} {n}" for t, n in sorted(self.counts.items()) if n)
        return (f"erased {self.address} (erasure {self.erasure_id}): "
                f"{changed or 'nothing left to erase'}")


def erasure_key() -> str:
    """Return the erasure key from :data:`outreach.db.ERASURE_KEY_VAR`.

    :raises ErasureError: it is not set or shorter than :data:`KEY_MIN_LENGTH` characters.
    """
    key = os.environ.get(db.ERASURE_KEY_VAR, "")
    if len(key) < KEY_MIN_LENGTH:
        raise ErasureError(f"set {db.ERASURE_KEY_VAR} (at least {KEY_MIN_LENGTH} characters, the "
                           "same in every process: see docs/howto/erasure.md) before erasing")
    return key


def address_forms(address: str) -> list[str]:
    """Return the spellings under which ``address`` may be stored: the normal form
    (:func:`outreach.addresses.normal_form`, lower-cased) first, then, for an internationalised
    domain, its IDNA (``xn--``) spelling, as inbound reports name it.

    :param address: the address as the operator wrote it.
    :raises ErasureError: it has no ``@``.
    """
    norm = normal_form(address.strip()).lower()
    local, sep, domain = norm.rpartition("@")
    if not sep or not local or not domain:
        raise ErasureError("that is not an email address")
    forms = [norm]
    try:
        import idna

        ace = f"{local}@{idna.encode(domain, uts46=True).decode('ascii')}"
    except (UnicodeError, idna.IDNAError):
        ace = norm
    if ace != norm:
        forms.append(ace)
    return forms


def erase(url: str, address: str, *, actor: str, reason: str,
          who: Any = None) -> ErasureResult:
    """Erase the person with ``address`` (one transaction; running it again changes nothing more).

    The audit trail gets one ``erase`` row in the same transaction: who, why, the erasure's id and
    its counts per table, never the address (:mod:`outreach.audit`).

    :param url: the outreach database (libpq URL).
    :param address: the person's address, as written anywhere (it is normalised).
    :param actor: who asked for it (recorded).
    :param reason: why, e.g. a ticket number (recorded; must not name the person).
    :param who: who decides (:class:`outreach.audit.Who`: the Airflow user, ``os:<login>``);
        ``None``: ``actor`` through ``api``.
    :raises ErasureError: no key, a reason naming the person, a mailbox's own address, an email
        to the person being sent right now (run it again later), or no database.
    """
    key = erasure_key()
    forms = address_forms(address)
    try:
        with db.connect(url, erasure_key=key) as conn, conn.transaction():
            store.erasure_wait_for_imports(conn)  # an import in flight may re-store the address
            erased = store.erasure_erase_person(conn, forms=forms, actor=actor, reason=reason)
            erasure_id, counts = erased.erasure_id, erased.counts
            audit.record_as(conn, who or audit.Who(actor), by=actor, action="erase",
                            target_kind="lead", reason=reason,
                            details={"erasure_id": erasure_id, "counts": counts})
    except (psycopg.errors.InvalidParameterValue, psycopg.errors.ObjectInUse) as exc:
        raise ErasureError(str(exc.diag.message_primary)) from None
    except db.OutreachDBError as exc:
        raise ErasureError(str(exc).splitlines()[0]) from None
    result = ErasureResult(erasure_id, mask(forms[0]), counts)
    log.info(result.line())
    return result
