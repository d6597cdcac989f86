"""Who makes a decision inside an Airflow task, for the audit trail (:mod:`outreach.audit`)."""

from __future__ import annotations

from typing import Any


def airflow_who(by: str) -> Any:
    """Return who makes this task's decision (:class:`outreach.audit.Who`): the Airflow user who
    triggered the run (``DagRun.triggering_user_name``, from Airflow's login, never typed), through
    ``airflow``, with the DAG and run ids. A run nobody triggered by hand (a schedule, an asset)
    is ``airflow:<run type>``. Outside a task (a script calling this module) it is ``by`` through
    ``api``.

    :param by: the name the form asked for (kept in the audit row's details when it differs).
    """
    from airflow.sdk import get_current_context

    from outreach.audit import Who

    try:
        context = get_current_context()
    except RuntimeError:  # not inside an Airflow task
        return Who(by)
    dag_run = context.get("dag_run")
    user = getattr(dag_run, "triggering_user_name", None)
    actor = user or f"airflow:{getattr(dag_run, 'run_type', None) or 'unknown'}"
    return Who(actor, "airflow", getattr(dag_run, "dag_id", None), getattr(dag_run, "run_id", None))
