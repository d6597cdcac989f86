"""The audit trail: one append-only row per operator decision, written in the decision's own
transaction (an outbox: no change without its row, no row without its change).

``actor`` is who is authenticated (the Airflow user, ``os:<login>``), not a typed name; rows never
hold a full address; the table refuses UPDATE, DELETE and TRUNCATE. docs/howto/audit-trail.md."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from psycopg.types.json import Jsonb

from outreach import db
from outreach.logutil import mask_addresses
from outreach.store import Conn
from outreach.store import audit_logs as store

ACTIONS = ("suppress", "unsuppress", "pause", "resume", "resolve", "requeue", "stop", "submit",
           "approve", "reject", "erase", "settings")
"""The decisions recorded (``outreach_audit_log_action_check``): ``erase`` and ``settings`` are
reserved for the erasure and for setting changes that change sending."""

VIAS = ("cli", "airflow", "page", "api")
"""Through what (``outreach_audit_log_via_check``): the ``outreach`` command, an Airflow task, the
campaign page, or a direct call of the package (a script, a test)."""


@dataclass(frozen=True)
class Who:
    """Who makes a decision and through what: ``actor`` (an Airflow user name, ``os:<login>``),
    ``via`` (one of :data:`VIAS`) and, for an Airflow task, the ``dag_id`` and ``run_id``."""

    actor: str
    via: str = "api"
    dag_id: str | None = None
    run_id: str | None = None


def cli_who(login: str) -> Who:
    """Return the CLI's :class:`Who`: ``os:<login>`` through ``cli``.

    :param login: the OS user (:func:`outreach.cli.common.operator_name`).
    """
    return Who(f"os:{login}", "cli")


def _masked(value: Any) -> Any:
    """``value`` with every address in its texts masked (dicts and lists walked)."""
    if isinstance(value, str):
        return mask_addresses(value)
    if isinstance(value, dict):
        return {str(k): _masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return value


def record(conn: Conn, *, action: str, actor: str, via: str, target_kind: str,
           target_key: str | None = None, target_id: int | None = None,
           reason: str | None = None, details: dict[str, Any] | None = None,
           dag_id: str | None = None, run_id: str | None = None,
           campaign_key: str | None = None) -> int:
    """Record one operator decision inside the caller's transaction (the decision's own).

    :param action: one of :data:`ACTIONS`.
    :param actor: who (the Airflow user, ``os:<login>``); non-empty.
    :param via: one of :data:`VIAS`.
    :param target_kind: ``suppression``, ``campaign``, ``mailbox``, ``email``, ``enrollment``,
        ``lead`` or ``settings``, named by ``target_key`` and/or ``target_id``.
    :param campaign_key: the campaign the decision belongs to.
    :param details: JSON-able; ids and counts (texts are masked).
    :returns: the audit row's id.
    :raises ValueError: an unknown action or via, or an empty actor (nothing written)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; one of {ACTIONS}")
    if via not in VIAS:
        raise ValueError(f"unknown audit via {via!r}; one of {VIAS}")
    if not (actor or "").strip():
        raise ValueError("an audit row needs who (actor)")
    return store.audit_log_insert(
        conn, actor=actor.strip(), via=via, action=action, target_kind=target_kind,
        target_key=_masked(target_key), target_id=target_id, campaign_key=campaign_key,
        reason=_masked(reason), details=Jsonb(_masked(details or {})), dag_id=dag_id,
        run_id=run_id)


def record_as(conn: Conn, who: Who, *, by: str | None = None, **what: Any) -> int:
    """Record a decision made by ``who`` (:func:`record` with its actor, via, dag and run).

    :param by: the name the operator typed (``--by``, a form's field), kept in ``details["by"]``
        when it differs from the actor.
    :param what: :func:`record`'s other keywords.
    """
    details = dict(what.pop("details", None) or {})
    if by and by.strip() and by.strip() != who.actor:
        details["by"] = by.strip()
    return record(conn, actor=who.actor, via=who.via, dag_id=who.dag_id, run_id=who.run_id,
                  details=details, **what)


def audit_rows(url: str, *, campaign_key: str | None = None, since: dt.datetime | None = None,
               limit: int = 200) -> list[dict[str, Any]]:
    """Return the audit rows, newest first, as dicts (``at`` UTC-aware): of one campaign or all,
    at or after ``since``, at most ``limit``."""
    with db.connect(url, autocommit=True) as conn:
        return [asdict(r) for r in store.audit_log_list(conn, campaign_key=campaign_key,
                                                        since=since, limit=limit)]


def describe(row: dict[str, Any]) -> str:
    """Return one audit row as one line: ``2026-03-08 10:31 UTC  os:dana (cli)  pause campaign
    q4-intro: legal review``."""
    at = row["at"].astimezone(dt.UTC)
    target = " ".join(str(p) for p in (row["target_kind"], row["target_key"] or row["target_id"])
                      if p is not None)
    run = f"  [{row['dag_id']}/{row['run_id']}]" if row.get("dag_id") else ""
    extra = row.get("details") or {}
    return (f"{at:%Y-%m-%d %H:%M:%S} UTC  {row['actor']} ({row['via']})  {row['action']} "
            f"{target}" + (f": {row['reason']}" if row.get("reason") else "")
            + (f"  {extra}" if extra else "") + run)
