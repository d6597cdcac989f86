"""Task bodies of ``outreach_export``: the warehouse and file targets, and the export itself (see
:mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import (
    database_url,
)


def sql_export_target(conn_id: str, name: str) -> Any:
    """The warehouse tables behind Airflow SQL connection ``conn_id`` as an export target
    (:class:`outreach.export.SqlTarget`, cursor ``name``), through the connection's common-sql
    hook (its driver and placeholder).

    :raises outreach.settings.SettingsError: the connection does not exist, or its type's hook
        is not a common-sql ``DbApiHook``.
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    from outreach.airflow.connections import _connection
    from outreach.export import SqlTarget
    from outreach.settings import SettingsError

    conn = _connection(conn_id)
    if conn is None:
        raise SettingsError(f"export connection {conn_id!r} does not exist (airflow connections add)")
    hook = conn.get_hook()
    if not isinstance(hook, DbApiHook):
        raise SettingsError(f"export connection {conn_id!r}: its hook "
                            f"{type(hook).__name__} is not a SQL (common-sql DbApiHook) hook")
    return SqlTarget(name, hook.get_conn, getattr(hook, "placeholder", "%s"))


def file_export_target(path: str, name: str, conn_id: str | None = None) -> Any:
    """The folder ``path`` (an ``ObjectStoragePath`` URL, read with connection ``conn_id``) as an
    export target of JSON-lines files (:class:`outreach.export.FileTarget`, cursor ``name``)."""
    from airflow.sdk import ObjectStoragePath

    from outreach.export import FileTarget

    root = ObjectStoragePath(path.rstrip("/") + "/", conn_id=conn_id)
    root.mkdir(parents=True, exist_ok=True)
    return FileTarget(name, root)


def export_task(kind: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export the new events to the ``kind`` target (``"sql"`` or ``"files"``), configured by
    ``params`` (the DAG's: ``conn_id``, ``path``, ``batch_size``; ``None`` values fall back to
    :class:`outreach.settings.ExportSettings`); return the counts. See :func:`outreach.export.export`.

    :raises airflow.sdk.exceptions.AirflowSkipException: that target is not configured.
    :raises outreach.settings.SettingsError: a setting is out of range, the connection is missing.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach.export import export
    from outreach.settings import ExportSettings

    p = {k: v for k, v in (params or {}).items() if v not in (None, "")}
    s = ExportSettings()
    if kind == "sql":
        conn_id = p.get("conn_id", s.export_conn_id)
        if not conn_id:
            raise AirflowSkipException("no SQL target: OUTREACH_EXPORT_CONN_ID is not set")
        target = sql_export_target(conn_id, s.export_sql_target)
    else:
        path = p.get("path", s.export_path)
        if not path:
            raise AirflowSkipException("no file target: OUTREACH_EXPORT_PATH is not set")
        target = file_export_target(path, s.export_files_target, s.export_path_conn_id)
    batch = ExportSettings(export_batch_size=p["batch_size"]).export_batch_size \
        if "batch_size" in p else s.export_batch_size
    result = export(database_url(), target, batch=batch)  # logs its line
    return {"target": result.target, "batches": result.batches, "events": result.events,
            "resumed": result.resumed}
