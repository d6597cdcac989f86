"""Retention: personal content kept only as long as needed (issue 27; GDPR Art. 5(1)(e),
storage limitation).

Two kinds of content age out, each after its own number of days
(:class:`outreach.settings.RetentionSettings`):

* what an inbound message said about a person — sender, subject, the address a report named,
  the diagnostic and the evidence text (``outreach.inbound_messages``);
* an import run's problem lines, which quote the rows' fields (``outreach.import_runs.problems``).

The rows stay and only their content is blanked (``sql/queries/retention.sql``; migration 0125
says why): the inbound UNIQUE keys are what make a message read twice apply once. Each batch is
its own transaction guarded by ``… purged_at IS NULL``, so a purge killed half-way and run again,
or two at once (``SKIP LOCKED``), purge every row once. The send log is never purged here.
"""

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

    :param url: the outreach database (libpq URL).
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
