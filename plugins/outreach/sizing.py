"""The sizing rule: how many send tasks, task slots and SMTP sessions a deployment runs at once,
from its mailboxes, sessions per mailbox and workers; the one place it lives (applied by
``make airflow``, ``docker-compose.yaml`` and ``outreach doctor``).

Pool P = min(mailboxes × sessions, workers × send slots), batches a run = P, sessions per send
task T = the largest divisor of P ≤ send slots (about one send task per worker a run), worker
concurrency ceil(P / workers) + 1, parallelism workers × C. A value set in the environment wins; :func:`caps`
says which one holds the workers back. Inputs and examples: docs/reference/sizing.md."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

EXTRA_SLOTS_PER_WORKER = 1
"""Task slots per worker beyond its share of the pool: for the tasks that hold no SMTP session."""
DEFAULT_MAILBOXES = 4
DEFAULT_SESSIONS_PER_MAILBOX = 1
DEFAULT_WORKER_SEND_SLOTS = 4


def sessions_per_task(pool_slots: int, worker_send_slots: int = DEFAULT_WORKER_SEND_SLOTS) -> int:
    """SMTP sessions one send task runs at once: the largest number that is at most a worker's
    send slots and divides the pool, at least 1. At most the pool: Airflow starts no task that
    needs more slots than its pool has. Dividing it: every task holds that many slots, so with
    pool 6 and tasks of 4 the second task (4 slots for 2 batches) would wait for the first;
    tasks of 3 run at once. It depends on no count of workers but through the pool, which a
    worker started later reads from the running deployment
    (:func:`outreach.dev.deploy.running_pool_slots`)."""
    pool = max(1, pool_slots)
    return next(n for n in range(min(pool, max(1, worker_send_slots)), 0, -1) if pool % n == 0)


@dataclass(frozen=True)
class Sizing:
    """The rule's inputs; its outputs are properties (see the module docstring).

    :param mailboxes: active sending mailboxes (≥ 1).
    :param sessions_per_mailbox: SMTP sessions one mailbox may hold at once (≥ 1).
    :param workers: workers (Celery) or 1 (LocalExecutor).
    :param worker_send_slots: send tasks one worker runs at once (≥ 1).
    :raises ValueError: an input below 1.
    """

    mailboxes: int
    sessions_per_mailbox: int = DEFAULT_SESSIONS_PER_MAILBOX
    workers: int = 1
    worker_send_slots: int = DEFAULT_WORKER_SEND_SLOTS

    def __post_init__(self) -> None:
        for name in ("mailboxes", "sessions_per_mailbox", "workers", "worker_send_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"sizing: {name} must be at least 1, got {getattr(self, name)}")

    @property
    def session_limit(self) -> int:
        """SMTP sessions the mailboxes allow at once: mailboxes × sessions per mailbox."""
        return self.mailboxes * self.sessions_per_mailbox

    @property
    def pool_slots(self) -> int:
        """Slots of the ``outreach_smtp`` pool: min(session limit, workers × send slots)."""
        return max(1, min(self.session_limit, self.workers * self.worker_send_slots))

    @property
    def send_parallelism(self) -> int:
        """Mapped send batches per run: the pool's slots."""
        return self.pool_slots

    @property
    def sessions_per_task(self) -> int:
        """SMTP sessions one send task runs at once (holding as many pool slots): the largest
        divisor of the pool up to a worker's send slots (:func:`sessions_per_task`), so a run has
        about one send task per worker and pays one task start-up per worker, not per session."""
        return sessions_per_task(self.pool_slots, self.worker_send_slots)

    @property
    def worker_concurrency(self) -> int:
        """Task slots per worker: its share of the pool plus :data:`EXTRA_SLOTS_PER_WORKER`."""
        return math.ceil(self.pool_slots / self.workers) + EXTRA_SLOTS_PER_WORKER

    @property
    def parallelism(self) -> int:
        """Airflow's ``[core] parallelism``: every worker slot."""
        return self.workers * self.worker_concurrency

    def bound(self) -> str:
        """What bounds the sessions at once: ``mailboxes`` (L ≤ workers × slots) or ``workers``."""
        return ("mailboxes" if self.session_limit <= self.workers * self.worker_send_slots
                else "workers")

    def environment(self, executor: str) -> dict[str, str]:
        """Return the settings the rule gives (``CeleryExecutor`` adds the worker concurrency)."""
        out = {"OUTREACH_SMTP_POOL_SLOTS": str(self.pool_slots),
               "OUTREACH_SEND_PARALLELISM": str(self.send_parallelism),
               "OUTREACH_SEND_SESSIONS_PER_TASK": str(self.sessions_per_task),
               "AIRFLOW__CORE__PARALLELISM": str(self.parallelism)}
        if executor == "CeleryExecutor":
            out["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(self.worker_concurrency)
        return out

    def line(self) -> str:
        """One line for logs: inputs, outputs and the bound."""
        return (f"sizing: {self.mailboxes} mailbox(es) × {self.sessions_per_mailbox} session(s) = "
                f"{self.session_limit} SMTP sessions; {self.workers} worker(s) × "
                f"{self.worker_send_slots} send slots; pool outreach_smtp {self.pool_slots}, "
                f"{self.send_parallelism} batches a run, {self.sessions_per_task} session(s) a "
                f"send task, worker concurrency "
                f"{self.worker_concurrency}, parallelism {self.parallelism} (bound: {self.bound()})")


def _whole(name: str, default: int) -> int:
    from outreach.settings import SettingsError

    raw = os.environ.get(name, "").strip() or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise SettingsError(f"{name} must be a whole number ≥ 1, got {raw!r}")
    return int(raw)


def count_mailboxes(url: str | None) -> int | None:
    """Active mailboxes in the outreach database at ``url``; ``None`` when it cannot be read."""
    if not url:
        return None
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM outreach.mailboxes WHERE status = 'active'"
                               ).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None


def from_environment(workers: int, url: str | None = None) -> Sizing:
    """Return the rule's inputs from the environment; mailboxes from ``OUTREACH_MAILBOXES``, else
    counted at ``url``, else :data:`DEFAULT_MAILBOXES`.

    :raises outreach.settings.SettingsError: an input is not a whole number ≥ 1."""
    counted = None if os.environ.get("OUTREACH_MAILBOXES") else count_mailboxes(url)
    return Sizing(mailboxes=counted or _whole("OUTREACH_MAILBOXES", DEFAULT_MAILBOXES),
                  sessions_per_mailbox=_whole("OUTREACH_SESSIONS_PER_MAILBOX",
                                              DEFAULT_SESSIONS_PER_MAILBOX),
                  workers=workers,
                  worker_send_slots=_whole("OUTREACH_WORKER_SEND_SLOTS", DEFAULT_WORKER_SEND_SLOTS))


def caps(sizing: Sizing, *, pool_slots: int, send_parallelism: int, parallelism: int,
         worker_concurrency: int | None, per_task: int = 1) -> list[str]:
    """Say which configured value holds the workers back below what the rule allows: one line
    each, naming the setting, its value and the rule's (nothing when none does).

    :param worker_concurrency: ``None`` for the LocalExecutor.
    :param per_task: ``OUTREACH_SEND_SESSIONS_PER_TASK``: one that exceeds or does not
        divide the pool is cut to :func:`sessions_per_task` where the pool's size is set too
        (:func:`outreach.airflow.defaults.send_sessions_per_task`); where it is not, a task of more
        slots than the pool never starts, and one that does not divide it waits for a round.
    """
    out = []
    if not 1 <= per_task <= 64:
        out.append(f"OUTREACH_SEND_SESSIONS_PER_TASK={per_task} is outside 1 to 64: the DAG reads "
                   "it as 1 and the send run's plan fails with the settings error")
    taken = sessions_per_task(pool_slots, per_task)
    if 1 <= per_task <= 64 and per_task != taken:
        without = ("no send task would ever start" if per_task > pool_slots
                   else "a run's tasks would not all start at once")
        out.append(f"OUTREACH_SEND_SESSIONS_PER_TASK={per_task} "
                   f"{'exceeds' if per_task > pool_slots else 'does not divide'} the "
                   f"pool's {pool_slots} slots: send tasks take {taken} where "
                   f"OUTREACH_SMTP_POOL_SLOTS={pool_slots} is set for every Airflow process "
                   f"(without it, {without}); set it to the rule's {sizing.sessions_per_task} "
                   f"or another divisor of {pool_slots}")
    if pool_slots < sizing.pool_slots:
        out.append(f"OUTREACH_SMTP_POOL_SLOTS={pool_slots} caps the SMTP sessions below the "
                   f"rule's {sizing.pool_slots} ({sizing.bound()} allow that many)")
    if pool_slots > sizing.session_limit:
        out.append(f"OUTREACH_SMTP_POOL_SLOTS={pool_slots} exceeds the mailboxes' "
                   f"{sizing.session_limit} sessions at once (mailboxes × "
                   "OUTREACH_SESSIONS_PER_MAILBOX): the provider may refuse them")
    if send_parallelism < pool_slots:
        out.append(f"OUTREACH_SEND_PARALLELISM={send_parallelism} caps a run below the pool's "
                   f"{pool_slots} slots: set it to {pool_slots}")
    slots = (worker_concurrency * sizing.workers if worker_concurrency is not None else None)
    if worker_concurrency is not None and worker_concurrency < math.ceil(
            pool_slots / sizing.workers) + EXTRA_SLOTS_PER_WORKER:
        out.append(f"AIRFLOW__CELERY__WORKER_CONCURRENCY={worker_concurrency} leaves the pool's "
                   f"{pool_slots} slots unused on {sizing.workers} worker(s): set it to "
                   f"{math.ceil(pool_slots / sizing.workers) + EXTRA_SLOTS_PER_WORKER}")
    need = slots if slots is not None else pool_slots + EXTRA_SLOTS_PER_WORKER
    if parallelism < need:
        out.append(f"AIRFLOW__CORE__PARALLELISM={parallelism} caps the tasks below what the "
                   f"worker(s) could run ({need}): set it to {need}")
    return out
