"""Mailbox health rules that pause a mailbox on their own; only an operator resumes it.

Three rules, run daily by the ``outreach_postmaster`` DAG (and ``outreach mailbox
check-spam-rate`` / ``check-bounces`` / ``check-complaints``); the bounce and complaint rules also
run after every read of the inboxes (``outreach_inbox``), which is where late bounces and
feedback-loop complaints arrive:

* **Spam rate** (:func:`pause_on_spam_rate`): when the latest *known* Postmaster Tools spam rate
  of a mailbox's domain (``SPAM_RATE``), or of the mailbox's own feedback loop
  (``FEEDBACK_LOOP_SPAM_RATE`` for its Feedback-ID field ``m<id>``), is above the threshold —
  default 0.1 % (0.001), Gmail's sender guidelines: keep the spam rate below 0.1 % and never let
  it reach 0.3 % — the mailbox is paused by ``postmaster`` with the figure and its date as the
  reason. Days without data are skipped, never read as 0 %; with no known figure at all nothing
  happens.
* **Hard-bounce rate** (:func:`pause_on_bounce_rate`), our own signal whatever Postmaster says:
  above 3 % (0.03) of at least 20 sends over the last 28 days, the mailbox is paused by
  ``bounce-rate``. A hard bounce is a permanent failure at RCPT with a 5.1.x reply, or an address
  suppressed as 'bounced' (see ``mailbox_bounce_counts`` in ``sql/queries/mailboxes.sql``).
* **Complaint rate** (:func:`pause_on_complaint_rate`): feedback-loop complaints (ARF reports the
  inbox reader recorded, or addresses suppressed as 'complained') above 0.1 % (0.001) of the
  same sends, after the same minimum and window as the bounce rule, pause the mailbox by
  ``complaint-rate`` (Gmail and Yahoo sender guidelines: keep the spam complaint rate below
  0.1 %; with few sends a single complaint is above it, which is meant: complaints are rare).

After an operator resumes a mailbox, evidence that was already known then does not pause it
again (the operator decided on it): the spam rule only acts on a figure stored or revised after
the resume, the bounce rule only counts sends since the resume.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pydantic import Field, field_validator, model_validator

from outreach import db
from outreach.feedback import mailbox_feedback_loop_id
from outreach.logutil import log, mask
from outreach.mailboxes import pause
from outreach.postmaster import DEFAULT_BASE_URL, FEEDBACK_LOOP_SPAM_RATE, SPAM_RATE
from outreach.settings import OutreachSettings, SettingsError
from outreach.store import mailboxes as mailboxes_store
from outreach.store import postmaster as postmaster_store

SPAM_ACTOR = "postmaster"
BOUNCE_ACTOR = "bounce-rate"
COMPLAINT_ACTOR = "complaint-rate"


HealthSettingsError = SettingsError
"""A health setting is invalid (the same one-line error as every setting)."""


class HealthSettings(OutreachSettings):
    """Thresholds (fractions: 0.001 = 0.1 %) and the Postmaster fetch, each read once from its
    ``OUTREACH_*`` variable with its range (see :mod:`outreach.settings`). Values are read by
    the strict rule of :meth:`outreach.settings.OutreachSettings._strict` (empty, ``1_0`` are
    errors).

    | variable                         | field                 | default |
    |----------------------------------|-----------------------|---------|
    | OUTREACH_SPAM_RATE_THRESHOLD     | spam_rate_threshold   | 0.001 (0.1 %) |
    | OUTREACH_BOUNCE_RATE_THRESHOLD   | bounce_rate_threshold | 0.03 (3 %) |
    | OUTREACH_BOUNCE_MIN_SENDS        | bounce_min_sends      | 20 |
    | OUTREACH_BOUNCE_WINDOW_DAYS      | bounce_window_days    | 28 (also the complaint rule's) |
    | OUTREACH_COMPLAINT_RATE_THRESHOLD | complaint_rate_threshold | 0.001 (0.1 %; minimum sends as the bounce rule) |
    | OUTREACH_BOUNCE_WARN_RATE        | bounce_warn_rate      | 0.02 (2 %: an alert before the pause) |
    | OUTREACH_POSTMASTER_DAYS         | postmaster_days       | 14 (days fetched, today included) |
    | OUTREACH_POSTMASTER_BASE_URL     | postmaster_base_url   | https://gmailpostmastertools.googleapis.com |
    """

    spam_rate_threshold: float = Field(0.001, gt=0, lt=0.003, description=(
        "a fraction above 0 and below 0.003 (Gmail: never reach 0.3 %)"))
    bounce_rate_threshold: float = Field(0.03, gt=0, lt=1, description=(
        "a fraction above 0 and below 1 (0.03 = 3 %)"))
    bounce_min_sends: int = Field(20, ge=1, le=1_000_000, description="sends, 1 to 1000000")
    bounce_window_days: int = Field(28, ge=1, le=365, description="days, 1 to 365")
    complaint_rate_threshold: float = Field(0.001, gt=0, lt=1, description=(
        "a fraction above 0 and below 1 (0.001 = 0.1 %)"))
    bounce_warn_rate: float = Field(0.02, gt=0, lt=1, description=(
        "a fraction above 0 and below OUTREACH_BOUNCE_RATE_THRESHOLD (0.02 = 2 %: an alert "
        "before the pause)"))
    postmaster_days: int = Field(14, ge=1, le=120, description="days, 1 to 120")
    postmaster_base_url: str = Field(DEFAULT_BASE_URL, pattern=r"^https?://\S+$", description=(
        "an http(s):// URL (the API root)"))

    @field_validator("postmaster_base_url")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return v.rstrip("/")

    @model_validator(mode="after")
    def _warn_before_the_pause(self) -> HealthSettings:
        if not self.bounce_warn_rate < self.bounce_rate_threshold:
            raise ValueError("OUTREACH_BOUNCE_WARN_RATE must be below OUTREACH_BOUNCE_RATE_THRESHOLD "
                             "(it warns before the pause)")
        return self

    @classmethod
    def from_env(cls) -> HealthSettings:
        """Build the settings from environment variables (see the class docstring).

        :raises SettingsError: a value is not a number or out of range.
        """
        return cls()


def percent(fraction: float) -> str:
    """Format a fraction as a percentage for people: ``0.0011`` → ``"0.11 %"``."""
    return f"{fraction * 100:.3g} %"


@dataclass(frozen=True)
class Verdict:
    """A rule found a mailbox above its threshold: ``mailbox_id``, ``mailbox`` (masked),
    ``rule`` (``spam_rate``, ``feedback_loop_spam_rate``, ``bounce_rate`` or ``complaint_rate``), ``value``
    (a fraction), ``reason`` (recorded with the pause) and ``paused`` (False when the mailbox
    was already paused, so nothing changed)."""

    mailbox_id: int
    mailbox: str
    rule: str
    value: float
    reason: str
    paused: bool

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)


def spam_rate_breach(mailbox: dict[str, Any], latest: dict[tuple[str, str, str], dict[str, Any]],
                     threshold: float) -> tuple[str, dict[str, Any]] | None:
    """Decide the spam-rate rule for one mailbox; a pure function.

    :param mailbox: ``{id, domain, resumed_at}`` (``mailbox_health_list``).
    :param latest: ``{(domain, metric, feedback_loop_id): {day, value, updated_at}}``, the latest
        day *with data* of each series (``postmaster_stat_latest_known``).
    :param threshold: a fraction; a figure strictly above it breaches ("keep it below 0.1 %").
    :returns: ``(rule, stat)`` of the highest breaching figure, or ``None`` — also when no
        figure is known, or when every breaching figure was known before the last resume.
    """
    found = []
    for rule, key in (("spam_rate", (mailbox["domain"], SPAM_RATE, "")),
                      ("feedback_loop_spam_rate", (mailbox["domain"], FEEDBACK_LOOP_SPAM_RATE,
                                                   mailbox_feedback_loop_id(mailbox["id"])))):
        stat = latest.get(key)
        if stat is None or stat["value"] is None or not stat["value"] > threshold:
            continue
        if mailbox.get("resumed_at") is not None and stat["updated_at"] <= mailbox["resumed_at"]:
            log.info("mailbox %s: %s %s on %s is above the threshold but was known when an "
                     "operator resumed the mailbox; not pausing again", mailbox["id"], rule,
                     percent(stat["value"]), stat["day"])
            continue
        found.append((stat["value"], rule, stat))
    if not found:
        return None
    _, rule, stat = max(found, key=lambda f: f[0])
    return rule, stat


def pause_on_spam_rate(url: str, *, threshold: float = 0.001,
                       now: dt.datetime | None = None) -> list[Verdict]:
    """Pause every active mailbox whose domain's or feedback loop's latest known Postmaster spam
    rate is above ``threshold`` (by ``postmaster``, reason = figure, date, threshold).

    :param threshold: a fraction (default 0.001 = 0.1 %, Gmail's sender guidelines).
    :param now: a fixed clock (UTC) for the pause; default the database clock.
    :returns: one :class:`Verdict` per breaching mailbox.
    """
    verdicts = []
    with db.transaction(url) as conn:
        latest = {(r.domain, r.metric, r.feedback_loop_id): asdict(r)
                  for r in postmaster_store.postmaster_stat_latest_known(conn)}
        for mb in mailboxes_store.mailbox_health_list(conn):
            if mb.status != "active":
                continue
            breach = spam_rate_breach(asdict(mb), latest, threshold)
            if breach is None:
                continue
            rule, stat = breach
            what = ("Postmaster spam rate of " + stat["domain"] if rule == "spam_rate" else
                    f"Postmaster feedback-loop spam rate of {stat['feedback_loop_id']} (Feedback-ID) "
                    f"on {stat['domain']}")
            reason = (f"{what}: {percent(stat['value'])} on {stat['day']:%Y-%m-%d}, above "
                      f"{percent(threshold)}")
            paused = pause(conn, mb.id, reason, SPAM_ACTOR, now=now) is not None
            verdicts.append(Verdict(mb.id, mask(mb.address), rule, stat["value"], reason, paused))
    for v in verdicts:
        log.warning("mailbox %s (%s) %s: %s", v.mailbox_id, v.mailbox,
                    "paused" if v.paused else "not paused (already paused)", v.reason)
    return verdicts


def bounce_rate_breach(sends: int, hard_bounces: int, threshold: float, min_sends: int) -> bool:
    """Decide the bounce-rate rule (and the complaint-rate rule, with complaints for
    ``hard_bounces``); a pure function: ``hard_bounces / sends > threshold`` once
    ``sends >= min_sends`` (compared exactly, as fractions)."""
    return sends >= min_sends and Fraction(hard_bounces, sends) > Fraction(str(threshold))


def pause_on_bounce_rate(url: str, *, threshold: float = 0.03, min_sends: int = 20,
                         window_days: int = 28, now: dt.datetime | None = None) -> list[Verdict]:
    """Pause every active mailbox whose hard-bounce rate over the last ``window_days`` days (or
    since an operator last resumed it) is above ``threshold`` after at least ``min_sends`` sends.

    :param threshold: a fraction (default 0.03 = 3 %).
    :param now: a fixed clock (UTC); default the database clock.
    :returns: one :class:`Verdict` per breaching mailbox.
    """
    return _pause_on_rate(url, "hard_bounces", "hard-bounce", "bounce_rate", BOUNCE_ACTOR,
                          threshold=threshold, min_sends=min_sends, window_days=window_days, now=now)


def pause_on_complaint_rate(url: str, *, threshold: float = 0.001, min_sends: int = 20,
                            window_days: int = 28, now: dt.datetime | None = None) -> list[Verdict]:
    """Pause every active mailbox whose complaint rate (ARF feedback-loop complaints, RFC 5965,
    among the same sends as the bounce rule counts) is above ``threshold`` after at least
    ``min_sends`` sends, by ``complaint-rate``, with the figure in the reason.

    :param threshold: a fraction (default 0.001 = 0.1 %, Gmail's and Yahoo's sender guidelines).
    :param now: a fixed clock (UTC); default the database clock.
    :returns: one :class:`Verdict` per breaching mailbox.
    """
    return _pause_on_rate(url, "complaints", "complaint", "complaint_rate", COMPLAINT_ACTOR,
                          threshold=threshold, min_sends=min_sends, window_days=window_days, now=now)


def _pause_on_rate(url: str, column: str, what: str, rule: str, actor: str, *, threshold: float,
                   min_sends: int, window_days: int, now: dt.datetime | None) -> list[Verdict]:
    """The bounce and complaint rules: ``column`` of ``mailbox_bounce_counts`` over its sends."""
    verdicts = []
    with db.transaction(url) as conn:
        for mb in mailboxes_store.mailbox_bounce_counts(
                conn, now=now, window=dt.timedelta(days=window_days)):
            if mb.status != "active":
                continue
            count: int = getattr(mb, column)
            if not bounce_rate_breach(mb.sends, count, threshold, min_sends):
                log.info("mailbox %s: %s %s(s) in %s send(s) since %s: below the rule",
                         mb.id, count, what, mb.sends, mb.since)
                continue
            rate = count / mb.sends
            reason = (f"{what} rate {percent(rate)} ({count} of {mb.sends} "
                      f"sends since {mb.since.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC), above "
                      f"{percent(threshold)}")
            paused = pause(conn, mb.id, reason, actor, now=now) is not None
            verdicts.append(Verdict(mb.id, mask(mb.address), rule, rate, reason, paused))
    for v in verdicts:
        log.warning("mailbox %s (%s) %s: %s", v.mailbox_id, v.mailbox,
                    "paused" if v.paused else "not paused (already paused)", v.reason)
    return verdicts


def bounce_warnings(url: str, *, warn_rate: float = 0.02, threshold: float = 0.03,
                    min_sends: int = 20, window_days: int = 28,
                    now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Return the active mailboxes whose hard-bounce rate is above ``warn_rate`` but not above
    the pause ``threshold`` (same counts and window as :func:`pause_on_bounce_rate`), for an
    alert before the rule pauses them: ``[{mailbox_id, address, rate, sends, hard_bounces,
    reason}]``. Reads only.
    """
    out = []
    with db.connect(url, autocommit=True) as conn:
        for mb in mailboxes_store.mailbox_bounce_counts(
                conn, now=now, window=dt.timedelta(days=window_days)):
            if (mb.status != "active"
                    or not bounce_rate_breach(mb.sends, mb.hard_bounces, warn_rate, min_sends)
                    or bounce_rate_breach(mb.sends, mb.hard_bounces, threshold, min_sends)):
                continue
            rate = mb.hard_bounces / mb.sends
            out.append({"mailbox_id": mb.id, "address": mb.address, "rate": rate,
                        "sends": mb.sends, "hard_bounces": mb.hard_bounces,
                        "reason": (f"hard-bounce rate {percent(rate)} ({mb.hard_bounces} of "
                                   f"{mb.sends} sends), above the warning level "
                                   f"{percent(warn_rate)}; the mailbox is paused above "
                                   f"{percent(threshold)}")})
    return out
