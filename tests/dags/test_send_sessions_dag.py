"""Several SMTP sessions in one send task (``OUTREACH_SEND_SESSIONS_PER_TASK``, issue 29), by real
Airflow (``airflow dags test``): the plan puts its batches two to a task, each task runs its two
sessions at once (counted at a real SMTP server on loopback), and every lead gets its email
exactly once. The pool's accounting under a real scheduler (a task holds as many slots as it
runs sessions) is proven by the Celery tests (tests/acceptance/test_celery.py: ``peak``)."""

from __future__ import annotations

import pytest

from outreach.queue import queue_due
from support import invariants
from support.airflowhome import env_for, fresh_home
from support.celerydeploy import CountingSink
from support.flow import EXPECTED_LEADS, import_demo, rows

pytestmark = pytest.mark.airflow


@pytest.fixture
def counting_sink(tmp_path):
    server = CountingSink(tmp_path / "counted").start()
    server.reset(delay=0.02)  # each message a little late, as from a relay: the sessions overlap
    yield server
    server.stop()


def test_a_send_task_runs_its_sessions_at_once(db_url, counting_sink, migrated_airflow_home, tmp_path,
                                               shared_airflow):
    import_demo(db_url)
    assert queue_due(db_url)["queued"] == EXPECTED_LEADS
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, counting_sink)
    env.update(OUTREACH_SEND_PARALLELISM="4", OUTREACH_BATCH_SIZE="25",
               OUTREACH_SEND_SESSIONS_PER_TASK="2", OUTREACH_PREFLIGHT="off")
    result = shared_airflow.run_dag(env, "outreach_send", tmp_path / "send.log")
    log = result.log.read_text()
    assert result.ok, log[-4000:]

    # Four batches of 25, two to a task: two send tasks, each with two sessions at once.
    tasks = rows(db_url, "SELECT substring(claimed_by from '/send_batch\\[(\\d+)\\]#') AS task, "
                         "count(*) AS n FROM outreach.emails WHERE status = 'sent' GROUP BY 1 ORDER BY 1")
    assert [(r["task"], r["n"]) for r in tasks] == [("0", 50), ("1", 50)], tasks
    assert "2 session(s), 2 at once" in log
    assert counting_sink.peak >= 2, "the sessions of one task ran one after the other"

    messages = counting_sink.messages()
    totals = invariants.assert_ok(db_url, messages)
    assert len(messages) == totals.sent_rows == 100
