"""The Required Action's confirmation step: a second human-in-the-loop task that only a *not
sent, requeue* answer opens (that answer can send a delivered message again, so it asks twice,
with the Sent-folder evidence in front of the person)."""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator


class ConfirmRequeue(HITLOperator):
    """A :class:`HITLOperator` that skips itself unless the task ``decide_task_id`` answered
    ``answer``; otherwise it waits like any Required Action (no default, no timeout).

    :param decide_task_id: the task whose answer is confirmed.
    :param answer: the answer that needs the confirmation (``"not sent, requeue"``).
    """

    def __init__(self, *, decide_task_id: str, answer: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.decide_task_id, self.answer = decide_task_id, answer

    def execute(self, context: Any) -> Any:
        """Skip (nothing to confirm), or open the confirmation.

        :raises airflow.sdk.exceptions.AirflowSkipException: another answer was chosen.
        """
        from airflow.sdk.exceptions import AirflowSkipException

        chosen = (context["ti"].xcom_pull(task_ids=self.decide_task_id) or {}).get(
            "chosen_options") or []
        if chosen != [self.answer]:
            raise AirflowSkipException(f"the answer was {chosen}: nothing to confirm")
        return super().execute(context)
