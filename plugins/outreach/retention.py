"""Retention: personal content kept only as long as needed (issue 27; GDPR Art. 5(1)(e)).

What an inbound message said about a person and an import run's problem lines are blanked after
their days (:class:`outreach.settings.RetentionSettings`); the rows stay (their UNIQUE keys keep
a message applied once, 0125). Batches guarded by ``purged_at IS NULL`` purge each row once; the
send log is never purged. docs/howto/retention.md."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from outreach import db
from outreach.logutil import log
from outreach.settings import RetentionSettings
from outreach.store import retention as store

BATCH = 5_000
"""Rows per transaction: short enough not to hold locks the inbox reader waits on."""


@dataclass(frozen=True)
class RetentionResult:
    """What one :func:`purge` did: rows blanked per kind, and the limits applied (days)."""

    inbound_purged: int
    import_runs_purged: int
    inbound_days: int
    import_problem_days: int

    def line(self) -> str:
        """The run's one summary line for the task log."""
        return (f"retention: {self.inbound_purged} inbound message(s) older than "
                f"{self.inbound_days} days blanked, {self.import_runs_purged} import run(s) "
                f"older than {self.import_problem_days} days had their problem lines removed")


def purge(url: str, *, now: dt.datetime | None = None,
          settings: RetentionSettings | None = None, batch: int = BATCH) -> RetentionResult:
    """Blank the personal content past its limit; return the counts.

    :param now: the clock (UTC, timezone-aware; default the database's ``now()``), for tests.
    :param settings: the limits (default read from the environment).
    :param batch: rows per transaction.
    :raises outreach.db.OutreachDBError: the database cannot be reached.
    :raises outreach.settings.SettingsError: a limit is not a whole number of days in range.
    :raises ValueError: ``batch`` is below 1.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    s = settings or RetentionSettings()
    counts = []
    for purge_batch, days in ((store.retention_purge_inbound, s.retention_inbound_days),
                              (store.retention_purge_import_problems,
                               s.retention_import_problem_days)):
        total = 0
        while True:
            with db.transaction(url) as conn:
                done = len(purge_batch(conn, days=days, batch=batch, now=now))
            total += done
            if done < batch:
                break
        counts.append(total)
    result = RetentionResult(counts[0], counts[1], s.retention_inbound_days,
                             s.retention_import_problem_days)
    log.info(result.line())
    return result
