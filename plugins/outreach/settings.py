"""Runtime settings from environment variables (secrets never live in the repo or the database).

| variable                     | meaning                                                     |
|------------------------------|-------------------------------------------------------------|
| OUTREACH_PUBLIC_URL          | https base URL of the unsubscribe service (RFC 8058 needs https) |
| OUTREACH_UNSUBSCRIBE_SECRET  | HMAC secret for unsubscribe tokens (at least 16 characters) |
| OUTREACH_FEEDBACK_SENDER_ID  | SenderId of the Feedback-ID header (5–15 characters)        |
| OUTREACH_BATCH_SIZE          | rows one send task claims at most (default 50)             |
| OUTREACH_SMTP_TIMEOUT        | seconds an SMTP reply may take (default 30)                 |
| OUTREACH_REAPER_MINUTES      | minutes before a `sending` row is failed as unconfirmed (30) |
| OUTREACH_SEND_INTERVAL_MINUTES | minutes between `outreach_send` runs, for pacing (10; 0 = no pacing) |
| OUTREACH_SEND_PARALLELISM    | mapped send tasks per run at most (default 4)               |
| OUTREACH_IMPORT_ROOTS        | folders lead and suppression files may be imported from (``include/data``) |
| OUTREACH_SEND_GAP_SECONDS    | least seconds between two handoffs of one mailbox (60; 0 = none) |
| OUTREACH_SEND_GAP_JITTER     | each gap is longer by up to this fraction of it, at random (0.5) |
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path


HANDOFF_REPLIES = 8
"""Replies one SMTP handoff may wait for: greeting, EHLO, STARTTLS, AUTH, MAIL, RCPT, DATA, end."""

HANDOFF_MARGIN = dt.timedelta(seconds=60)
"""Room for the database round trips around one handoff (the stamp, the outcome)."""


class SettingsError(ValueError):
    """A setting is missing or invalid; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    """Sender settings. Durations are :class:`datetime.timedelta`; ``smtp_timeout`` in seconds.

    Rules: at most ``max_attempts`` (3) attempts in total, retry ``retry_after`` (30 minutes)
    after a not-accepted error; the reaper threshold must exceed the longest one SMTP handoff can
    take (``HANDOFF_REPLIES`` × ``smtp_timeout`` + ``HANDOFF_MARGIN``), or the reaper could fail
    a row a live sender is still handing over.
    ``db_recover_seconds``: how long a batch that lost its database connection tries to reconnect
    to record the row it handed off and release the rest before it fails.

    Pacing and fan-out: ``send_interval_minutes`` is the send DAG's run interval (its schedule is
    ``*/10 * * * *``: keep the two equal); a day's sends are spread evenly over the full send
    window, no run above the steady rate ceil(daily limit / runs in the window) (``0`` turns
    pacing off: a run may use all of the day's remaining quota). ``send_parallelism`` is the number of
    mapped send tasks a run plans at most (each claims across mailboxes, at most ``batch_size``
    rows; Airflow's ``[core] max_map_length`` is 1024). The rule: ``mailbox_remaining_today`` in
    ``sql/queries/emails.sql``.

    Why 50 and 4 (measured by ``make bench``, "send at 100 ms a command"; README, "Sizing the
    defaults"): a relay's 50–300 ms a command makes one message over an open session take about
    3 × that latency, so a batch of 50 holds its rows 15–45 s — enough to amortise a task's start
    and a session per mailbox, and under the reaper rule with the default timeout (30 s × 50 <
    30 minutes). Throughput grows with the number of sessions, not our CPU, so parallelism is
    capacity: 4 × 50 = 200 emails a run, done well inside a 10-minute interval; raise it when the
    mailboxes' run shares add up to more than ``send_parallelism × batch_size``.

    Gap: two handoffs of one mailbox are at least ``send_gap_seconds`` apart, each gap longer by a
    random fraction of up to ``send_gap_jitter`` (``mailbox_reserve_handoffs``); a sender waits
    for its row's reserved moment. A claim takes only rows whose moment falls within
    :attr:`gap_horizon` (half the reaper threshold), so a row never waits long enough in
    'sending' to look stale. With the default 60–90 s a mailbox sends about 45 an hour at most;
    the 200 a run above are across mailboxes.
    """

    public_url: str
    unsubscribe_secret: str
    feedback_sender_id: str = "outreach"
    batch_size: int = 50
    smtp_timeout: float = 30.0
    max_attempts: int = 3
    retry_after: dt.timedelta = dt.timedelta(minutes=30)
    reaper_threshold: dt.timedelta = dt.timedelta(minutes=30)
    db_recover_seconds: float = 30.0
    send_interval_minutes: int = 10
    send_parallelism: int = 4
    send_gap_seconds: float = 60.0
    send_gap_jitter: float = 0.5

    def __post_init__(self) -> None:
        if not self.public_url.startswith("https://"):
            raise SettingsError("OUTREACH_PUBLIC_URL must be an https:// URL (RFC 8058 §3.1: "
                                f"List-Unsubscribe needs an HTTPS URI), got {self.public_url!r}")
        if len(self.unsubscribe_secret) < 16:
            raise SettingsError("OUTREACH_UNSUBSCRIBE_SECRET must be at least 16 characters")
        if not 5 <= len(self.feedback_sender_id) <= 15 or ":" in self.feedback_sender_id:
            raise SettingsError("OUTREACH_FEEDBACK_SENDER_ID must be 5–15 characters without ':' "
                                "(Gmail Feedback-ID format a:b:c:SenderId)")
        if self.batch_size < 1:
            raise SettingsError("OUTREACH_BATCH_SIZE must be at least 1")
        if not 0 <= self.send_interval_minutes <= 1440:
            raise SettingsError("OUTREACH_SEND_INTERVAL_MINUTES must be 0 (no pacing) to 1440")
        if not 1 <= self.send_parallelism <= 1024:
            raise SettingsError("OUTREACH_SEND_PARALLELISM must be 1 to 1024 (Airflow's "
                                "[core] max_map_length)")
        if not 0 <= self.send_gap_seconds <= 3600:
            raise SettingsError("OUTREACH_SEND_GAP_SECONDS must be 0 (no gap) to 3600")
        if not 0 <= self.send_gap_jitter <= 1:
            raise SettingsError("OUTREACH_SEND_GAP_JITTER must be a fraction from 0 to 1")
        # The reaper must outwait one handoff: the sender stamps a row (and restarts its claim
        # age) right before MAIL FROM, so a row further down a batch is never at risk, and a
        # never-stamped row is only put back in the queue. After the stamp, one handoff waits for
        # at most HANDOFF_REPLIES replies of OUTREACH_SMTP_TIMEOUT each (MAIL, RCPT, DATA, the end
        # of DATA, and the body's socket writes, with room for a reconnect's greeting, EHLO,
        # STARTTLS and AUTH), plus HANDOFF_MARGIN for the database round trips around it.
        longest_handoff = dt.timedelta(seconds=self.smtp_timeout * HANDOFF_REPLIES) + HANDOFF_MARGIN
        if self.reaper_threshold <= longest_handoff:
            raise SettingsError(
                f"OUTREACH_REAPER_MINUTES ({self.reaper_threshold}) must exceed the longest one "
                f"SMTP handoff can take, {HANDOFF_REPLIES} × OUTREACH_SMTP_TIMEOUT + "
                f"{HANDOFF_MARGIN.seconds} s ({longest_handoff})")

    @property
    def send_interval(self) -> dt.timedelta | None:
        """Return the send run interval used for pacing, or ``None`` when pacing is off."""
        return dt.timedelta(minutes=self.send_interval_minutes) if self.send_interval_minutes else None

    @property
    def gap_horizon(self) -> dt.timedelta:
        """Return how far ahead a claim reserves handoffs: half the reaper threshold."""
        return self.reaper_threshold / 2

    @property
    def unsubscribe_base(self) -> str:
        """Return the URL that unsubscribe tokens are appended to."""
        return self.public_url.rstrip("/") + "/unsubscribe/"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *,
                 unsubscribe: bool = True) -> Settings:
        """Build settings from environment variables.

        :param unsubscribe: the unsubscribe URL and secret are required (marketing mail). With
            ``False`` (transactional mail only, which carries no unsubscribe link) they may be
            unset, and placeholders that nothing uses take their place.
        :raises SettingsError: a required variable is missing or a value is invalid.
        """
        env = dict(os.environ if env is None else env)
        if not unsubscribe:
            env.setdefault("OUTREACH_PUBLIC_URL", "https://unsubscribe.invalid")
            env["OUTREACH_UNSUBSCRIBE_SECRET"] = (env.get("OUTREACH_UNSUBSCRIBE_SECRET")
                                                  or "unused-by-transactional-mail")
        missing = [k for k in ("OUTREACH_PUBLIC_URL", "OUTREACH_UNSUBSCRIBE_SECRET") if not env.get(k)]
        if missing:
            raise SettingsError(f"set {', '.join(missing)} (see README: Configuration)")
        try:
            return cls(
                public_url=env["OUTREACH_PUBLIC_URL"],
                unsubscribe_secret=env["OUTREACH_UNSUBSCRIBE_SECRET"],
                feedback_sender_id=env.get("OUTREACH_FEEDBACK_SENDER_ID", "outreach"),
                batch_size=int(env.get("OUTREACH_BATCH_SIZE", "50")),
                smtp_timeout=float(env.get("OUTREACH_SMTP_TIMEOUT", "30")),
                reaper_threshold=dt.timedelta(minutes=float(env.get("OUTREACH_REAPER_MINUTES", "30"))),
                send_interval_minutes=int(env.get("OUTREACH_SEND_INTERVAL_MINUTES", "10")),
                send_parallelism=int(env.get("OUTREACH_SEND_PARALLELISM", "4")),
                send_gap_seconds=float(env.get("OUTREACH_SEND_GAP_SECONDS", "60")),
                send_gap_jitter=float(env.get("OUTREACH_SEND_GAP_JITTER", "0.5")),
            )
        except ValueError as exc:
            if isinstance(exc, SettingsError):
                raise
            raise SettingsError(f"invalid number in settings: {exc}") from None


def import_roots(env: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Return the folders that lead and do-not-contact files may be imported from:
    ``OUTREACH_IMPORT_ROOTS``, a list separated by ``os.pathsep`` (``:``) or commas, default
    ``include/data``. A relative folder is relative to the project root
    (:func:`outreach.paths.project_root`); each is returned absolute with symlinks resolved.

    Why: the ``outreach_import_leads`` form takes a path typed in the Airflow UI, and the worker
    must not read (or report lines of) any other file it can reach. The check itself is
    :func:`outreach.leads.import_path`.

    :raises SettingsError: the value names no folder, or a folder that does not exist.
    """
    from outreach.paths import project_root

    env = os.environ if env is None else env
    raw = env.get("OUTREACH_IMPORT_ROOTS", "include/data")
    parts = [p.strip() for p in re.split(f"[,{re.escape(os.pathsep)}]", raw) if p.strip()]
    if not parts:
        raise SettingsError("OUTREACH_IMPORT_ROOTS names no folder (default include/data)")
    roots = []
    for part in parts:
        path = Path(part).expanduser()
        root = (path if path.is_absolute() else project_root() / path).resolve()
        if not root.is_dir():
            raise SettingsError(f"OUTREACH_IMPORT_ROOTS: {part!r} is not a folder ({root})")
        roots.append(root)
    return tuple(roots)
