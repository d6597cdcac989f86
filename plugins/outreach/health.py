"""Mailbox health rules that pause a mailbox on their own; only an operator resumes it.

Run daily by ``outreach_postmaster`` (and ``outreach mailbox check-*``); the bounce and complaint
rules also after every ``outreach_inbox`` read. Spam rate (:func:`pause_on_spam_rate`, Gmail's
sender guidelines: below 0.1 %, never 0.3 %), hard-bounce rate (:func:`pause_on_bounce_rate`:
owner "address gone", counted once per address; sender blocks have their own rule in
:mod:`outreach.bounces`) and complaint rate (:func:`pause_on_complaint_rate`, Gmail and Yahoo).
Evidence known at a resume does not pause again. The rules: docs/explanation/mailbox-health.md."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from outreach import db
from outreach.feedback import mailbox_feedback_loop_id
from outreach.logutil import log, mask
from outreach.mailboxes import pause
from outreach.postmaster import FEEDBACK_LOOP_SPAM_RATE, SPAM_RATE
from outreach.settings import HealthSettings as HealthSettings
from outreach.settings import SettingsError
from outreach.store import mailboxes as mailboxes_store
from outreach.store import postmaster as postmaster_store

SPAM_ACTOR = "postmaster"
BOUNCE_ACTOR = "bounce-rate"
COMPLAINT_ACTOR = "complaint-rate"


# HealthSettings is defined with every other settings group in outreach.settings (which imports
# nothing of the package, so no circle); it is imported above as itself and found here as before.
HealthSettingsError = SettingsError
"""A health setting is invalid (the same one-line error as every setting)."""


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
    :param threshold: a fraction; a figure strictly above it breaches.
    :returns: ``(rule, stat)`` of the highest breaching figure, or ``None`` (also when none is known,
        or every breach was known before the last resume)."""
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
