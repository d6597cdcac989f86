"""Erasure on request (issue 27, item 3; GDPR Art. 17): remove one person's personal data
everywhere outreach stores it, and keep them refused forever.

One stored function in one transaction, ``outreach.erase_person_v1`` (0129 lists every table):
the lead stays as a tombstone, the send log keeps its Message-IDs, and the address becomes a
keyed hash in ``outreach.suppressions`` (``OUTREACH_ERASURE_KEY``, never in the database; without
it an erasure fails). docs/howto/erasure.md."""

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
    """Erase the person with ``address`` in one transaction, with one ``erase`` audit row (no address).

    Running it again changes nothing more.

    :param address: the person's address, as written anywhere (it is normalised).
    :param actor: who asked for it (recorded).
    :param reason: why, e.g. a ticket number (recorded; must not name the person).
    :param who: who decides (:class:`outreach.audit.Who`); ``None``: ``actor`` through ``api``.
    :raises ErasureError: no key, a reason naming the person, a mailbox's own address, an email to
        the person being sent right now (run it again later), or no database."""
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
