"""The sizing rule: how many send tasks, task slots and SMTP sessions a deployment runs at once,
from what it sends with (mailboxes, sessions each mailbox may hold) and what runs it (workers).
The one place this rule lives; ``make airflow`` (both executors, :mod:`outreach.dev.deploy`),
``docker-compose.yaml`` and ``outreach doctor`` apply it (docs/reference/sizing.md).

Inputs (environment):

| variable                      | meaning                                          | default   |
|-------------------------------|--------------------------------------------------|-----------|
| OUTREACH_MAILBOXES            | active sending mailboxes                         | counted (4 if none) |
| OUTREACH_SESSIONS_PER_MAILBOX | SMTP sessions one mailbox may hold at once       | 1         |
| OUTREACH_WORKER_SEND_SLOTS    | send tasks (one SMTP session each) a worker runs | 4         |
| workers                       | ``--workers`` (1 for the LocalExecutor)          | 2         |

Sessions per mailbox is what the provider or relay allows; send slots per worker what its CPU and
memory carry.

The rule (each send task holds one ``outreach_smtp`` pool slot and one SMTP session at a time):

* SMTP-session limit  L = mailboxes × sessions per mailbox
* pool ``outreach_smtp`` P = min(L, workers × worker send slots), at least 1
  (``OUTREACH_SMTP_POOL_SLOTS``): never more sessions than the mailboxes allow, never more than
  the workers can run
* mapped send batches per run = P (``OUTREACH_SEND_PARALLELISM``): enough tasks to fill the pool
* worker concurrency C = ceil(P / workers) + 1 (``AIRFLOW__CELERY__WORKER_CONCURRENCY``): its
  share of the pool plus one slot for the tasks that hold no session (plan, summary, after_send,
  queue-due), so those never wait behind the sends
* parallelism = workers × C (``AIRFLOW__CORE__PARALLELISM``): the scheduler never holds back a
  task a worker has a slot for (the LocalExecutor: one worker, so P + 1)

A value set explicitly in the environment wins; :func:`caps` then says which one holds the
workers back.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

EXTRA_SLOTS_PER_WORKER = 1
"""Task slots per worker beyond its share of the pool: for the tasks that hold no SMTP session."""
DEFAULT_MAILBOXES = 4
DEFAULT_SESSIONS_PER_MAILBOX = 1
DEFAULT_WORKER_SEND_SLOTS = 4


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
               "AIRFLOW__CORE__PARALLELISM": str(self.parallelism)}
        if executor == "CeleryExecutor":
            out["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(self.worker_concurrency)
        return out

    def line(self) -> str:
        """One line for logs: inputs, outputs and the bound."""
        return (f"sizing: {self.mailboxes} mailbox(es) × {self.sessions_per_mailbox} session(s) = "
                f"{self.session_limit} SMTP sessions; {self.workers} worker(s) × "
                f"{self.worker_send_slots} send slots; pool outreach_smtp {self.pool_slots}, "
                f"{self.send_parallelism} batches a run, worker concurrency "
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
    """Return the rule's inputs from the environment (see the module docstring): mailboxes from
    ``OUTREACH_MAILBOXES``, else counted in the database at ``url``, else
    :data:`DEFAULT_MAILBOXES`.

    :raises outreach.settings.SettingsError: an input is not a whole number ≥ 1.
    """
    counted = None if os.environ.get("OUTREACH_MAILBOXES") else count_mailboxes(url)
    return Sizing(mailboxes=counted or _whole("OUTREACH_MAILBOXES", DEFAULT_MAILBOXES),
                  sessions_per_mailbox=_whole("OUTREACH_SESSIONS_PER_MAILBOX",
                                              DEFAULT_SESSIONS_PER_MAILBOX),
                  workers=workers,
                  worker_send_slots=_whole("OUTREACH_WORKER_SEND_SLOTS", DEFAULT_WORKER_SEND_SLOTS))


def caps(sizing: Sizing, *, pool_slots: int, send_parallelism: int, parallelism: int,
         worker_concurrency: int | None) -> list[str]:
    """Say which configured value holds the workers back below what the rule allows: one line
    each, naming the setting, its value and the rule's (nothing when none does).

    :param worker_concurrency: ``None`` for the LocalExecutor.
    """
    out = []
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
