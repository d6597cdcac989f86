"""The sizing rule (outreach.sizing): pool, batches a run, worker concurrency and parallelism from
mailboxes, sessions per mailbox and workers; and what `caps` says when a setting holds the workers
back."""

from __future__ import annotations

import pytest

from outreach.sizing import Sizing, caps


@pytest.mark.parametrize(("mailboxes", "sessions", "workers", "slots", "pool", "per_task", "conc", "par",
                          "bound"), [
    (4, 1, 1, 4, 4, 4, 5, 5, "mailboxes"),    # the LocalExecutor default: 4 sessions, +1 slot
    (4, 1, 2, 4, 4, 4, 3, 6, "mailboxes"),    # compose and make airflow EXECUTOR=celery
    (8, 2, 2, 4, 8, 4, 5, 10, "workers"),     # 16 sessions allowed, 2 workers run 8
    (8, 2, 4, 4, 16, 4, 5, 20, "mailboxes"),  # 4 workers fill the 16 sessions
    (1, 1, 3, 4, 1, 1, 2, 6, "mailboxes"),    # one mailbox: one session, whatever the workers
])
def test_the_rule(mailboxes, sessions, workers, slots, pool, per_task, conc, par, bound):
    s = Sizing(mailboxes, sessions, workers, slots)
    assert (s.pool_slots, s.worker_concurrency, s.parallelism, s.bound()) == (pool, conc, par, bound)
    assert s.send_parallelism == pool
    # A send task runs a worker's send slots of sessions, never more than the pool.
    assert s.sessions_per_task == per_task == min(slots, pool)
    assert s.environment("CeleryExecutor") == {
        "OUTREACH_SMTP_POOL_SLOTS": str(pool), "OUTREACH_SEND_PARALLELISM": str(pool),
        "OUTREACH_SEND_SESSIONS_PER_TASK": str(per_task),
        "AIRFLOW__CORE__PARALLELISM": str(par), "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(conc)}
    assert "AIRFLOW__CELERY__WORKER_CONCURRENCY" not in s.environment("LocalExecutor")


def test_two_workers_double_the_pool_until_the_mailboxes_cap_it():
    one, two, four = (Sizing(8, 2, w).pool_slots for w in (1, 2, 4))
    assert (one, two, four) == (4, 8, 16)
    assert Sizing(8, 2, 8).pool_slots == 16


def test_caps_name_the_setting_that_holds_the_workers_back():
    s = Sizing(8, 2, 2, 4)  # pool 8, concurrency 5, parallelism 10
    assert caps(s, pool_slots=8, send_parallelism=8, parallelism=10, worker_concurrency=5) == []
    found = caps(s, pool_slots=4, send_parallelism=4, parallelism=4, worker_concurrency=4)
    text = "\n".join(found)
    assert "OUTREACH_SMTP_POOL_SLOTS=4 caps the SMTP sessions below the rule's 8" in text
    assert "AIRFLOW__CORE__PARALLELISM=4 caps the tasks below what the worker(s) could run (8)" in text
    assert len(found) == 2
    found = caps(s, pool_slots=8, send_parallelism=4, parallelism=10, worker_concurrency=3)
    assert any(f.startswith("OUTREACH_SEND_PARALLELISM=4 caps a run") for f in found)
    assert any(f.startswith("AIRFLOW__CELERY__WORKER_CONCURRENCY=3 leaves") for f in found)
    assert any("exceeds the mailboxes' 16 sessions" in f for f in caps(
        s, pool_slots=20, send_parallelism=20, parallelism=50, worker_concurrency=12))
    # The LocalExecutor: one worker, the pool plus one slot.
    local = Sizing(4, 1, 1)
    assert caps(local, pool_slots=4, send_parallelism=4, parallelism=4, worker_concurrency=None) == [
        "AIRFLOW__CORE__PARALLELISM=4 caps the tasks below what the worker(s) could run (5): set it to 5"]


def test_caps_name_sessions_a_task_that_the_pool_cannot_hold_at_once():
    # Airflow never queues a task that needs more slots than its pool has, and every task of a
    # run holds the same slots: tasks of 4 on a pool of 6 would run one after the other.
    s = Sizing(4, 1, 2, 4)
    assert caps(s, pool_slots=4, send_parallelism=4, parallelism=6, worker_concurrency=3,
                per_task=2) == []
    assert caps(s, pool_slots=4, send_parallelism=4, parallelism=6, worker_concurrency=3,
                per_task=5) == [
        "OUTREACH_SEND_SESSIONS_PER_TASK=5 exceeds the pool's 4 slots: send tasks take 4 where "
        "OUTREACH_SMTP_POOL_SLOTS=4 is set for every Airflow process (without it, no send task "
        "would ever start); set it to the rule's 4 or another divisor of 4"]
    assert caps(s, pool_slots=4, send_parallelism=4, parallelism=6, worker_concurrency=3,
                per_task=65) == ["OUTREACH_SEND_SESSIONS_PER_TASK=65 is outside 1 to 64: the DAG "
                                 "reads it as 1 and the send run's plan fails with the settings error"]
    [line] = caps(Sizing(6, 1, 2, 4), pool_slots=6, send_parallelism=6, parallelism=8,
                  worker_concurrency=4, per_task=4)
    assert line.startswith("OUTREACH_SEND_SESSIONS_PER_TASK=4 does not divide the pool's 6 slots: "
                           "send tasks take 3 ")


@pytest.mark.parametrize(("pool", "slots", "per_task"), [
    (4, 4, 4), (8, 4, 4), (16, 4, 4), (6, 4, 3), (5, 4, 1), (2, 4, 2), (1, 4, 1), (12, 8, 6)])
def test_a_task_takes_the_largest_share_of_its_slots_that_divides_the_pool(pool, slots, per_task):
    from outreach.sizing import sessions_per_task

    assert sessions_per_task(pool, slots) == per_task
    assert pool % per_task == 0 and per_task <= min(pool, slots)


def test_an_input_below_one_is_refused():
    with pytest.raises(ValueError, match="workers must be at least 1"):
        Sizing(4, 1, 0)


def test_outreach_doctor_says_what_caps_the_workers(tmp_path):
    """`outreach doctor` prints the rule for the given workers and one `cap:` line per configured
    value that holds them back, exit 1; none, exit 0 (no database: the mailboxes' default)."""
    import os
    import subprocess
    import sys

    from support.paths import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTREACH_", "AIRFLOW"))}
    env.update(OUTREACH_HOME=str(ROOT), AIRFLOW_HOME=str(tmp_path / "af"), OUTREACH_MAILBOXES="8",
               OUTREACH_SESSIONS_PER_MAILBOX="2", OUTREACH_EMBEDDED_DB="0")

    def doctor(**more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "outreach.cli", "doctor", "--workers", "2"],
                              env={**env, **more}, capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)

    ok = doctor()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "pool outreach_smtp 8" in ok.stdout and "nothing caps the workers" in ok.stdout
    capped = doctor(AIRFLOW__CORE__PARALLELISM="4", OUTREACH_SMTP_POOL_SLOTS="4")
    assert capped.returncode == 1, capped.stdout + capped.stderr
    assert "cap: OUTREACH_SMTP_POOL_SLOTS=4 caps the SMTP sessions below the rule's 8" in capped.stdout
    assert "cap: AIRFLOW__CORE__PARALLELISM=4 caps the tasks" in capped.stdout
    # A value that is no whole number ≥ 1 is named, never a crash.
    bad = doctor(OUTREACH_SMTP_POOL_SLOTS="abc", OUTREACH_SEND_SESSIONS_PER_TASK="0")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "cap: OUTREACH_SMTP_POOL_SLOTS='abc' is not a whole number ≥ 1" in bad.stdout
    assert "cap: OUTREACH_SEND_SESSIONS_PER_TASK='0' is not a whole number ≥ 1" in bad.stdout
