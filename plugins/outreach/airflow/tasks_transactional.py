"""Task bodies of ``outreach_transactional``: enqueue a delivery from the trigger's params, then
send what is due (see :mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.alerts import (
    refused_logins,
)
from outreach.airflow.connections import (
    database_url,
    dkim_private_key,
    settings,
    smtp_connector,
)
from outreach.airflow.tasks_common import config_check_task
from outreach.logutil import log

TRANSACTIONAL_PARAMS = frozenset({"delivery_key", "to", "template", "context", "mailbox"})


def transactional_enqueue_task(params: dict[str, Any],
                               conf: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Enqueue the transactional email a DAG run asks for and commit; return its row, or ``None``
    without a delivery key (a scheduled cycle). Triggering twice with one key enqueues once.

    :param params: the run's params (``delivery_key``, ``to``, ``template``, ``context``, ``mailbox``).
    :param conf: the run's conf as triggered, to refuse keys the DAG does not take.
    :raises airflow.sdk.exceptions.AirflowFailException: an invalid request (the field named); no retry."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach import db
    from outreach.transactional import TransactionalError, enqueue

    config_check_task()
    unknown = sorted((set(params) | set(conf or {})) - TRANSACTIONAL_PARAMS)
    if unknown:
        raise AirflowFailException(f"unknown conf key(s) {unknown}: the conf takes "
                                   f"{sorted(TRANSACTIONAL_PARAMS)}")
    key = params.get("delivery_key")
    if key is None:
        if params.get("to"):
            raise AirflowFailException("delivery_key: required with 'to' (make it when the "
                                       "request arrives and reuse it on every retry)")
        log.info("no delivery_key in this run's conf: a send cycle only")
        return None
    if not isinstance(key, str) or not key.strip():
        # Never stripped: the key is compared exactly, as the application's enqueue does.
        raise AirflowFailException("delivery_key: must not be blank")
    try:
        with db.connect(database_url()) as conn, conn.transaction():
            result = enqueue(conn, key, params.get("to") or "", params.get("template") or "",
                             params.get("context") or {}, mailbox=params.get("mailbox") or None)
    except TransactionalError as exc:
        raise AirflowFailException(f"cannot enqueue delivery key {key!r}: {exc}") from None
    return {"email_id": result.email_id, "created": result.created, "status": result.status}


def transactional_send_task() -> dict[str, Any]:
    """One transactional send cycle (see :func:`outreach.transactional.send_due`); return its
    summary (one summary line per mailbox is logged)."""
    from outreach.send import MailboxUnreachable
    from outreach.transactional import send_due

    try:
        return send_due(database_url(), smtp_connector, settings(unsubscribe=False), worker=None,
                        dkim_keys=dkim_private_key).to_dict()
    except MailboxUnreachable as exc:
        refused_logins([f["conn_id"] for f in exc.failures], exc)
        raise
