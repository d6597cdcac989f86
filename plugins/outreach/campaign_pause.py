"""A campaign's status changes, with who, when and why: submit, approve, reject, pause, resume.

The states and allowed transitions are described once, at ``outreach.campaigns.status`` in
``sql/schema.sql``; each change is one guarded UPDATE writing its ``outreach.campaign_events``
row. A paused campaign is neither queued nor claimed; a row already claimed is sent.
docs/howto/stop-and-pause.md."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from outreach import audit, db
from outreach.logutil import log
from outreach.mailboxes import required  # the same rule as a mailbox pause
from outreach.store import Conn, campaigns


class CampaignNotFound(LookupError):
    """No campaign has the given key."""


@dataclass(frozen=True)
class CampaignChange:
    """The outcome of a pause or resume: ``campaign`` (key), ``changed`` (False when it already
    had that status), ``status`` after the call (``active``/``paused``), ``at`` (UTC)."""

    campaign: str
    changed: bool
    status: str
    at: dt.datetime | None = None

    verb: str = ""
    was: str = ""

    def attributed(self, by: str, reason: str) -> str:
        """:meth:`line` with who asked and why, for the log: "… paused by alice: legal review", or
        for a change that did not happen "… nothing changed (asked by alice: again)"."""
        return f"{self.line()} by {by}: {reason}" if self.changed else f"{self.line()} (asked by {by}: {reason})"

    def line(self) -> str:
        """Return a one-line description for logs and the CLI."""
        what = self.verb or {"paused": "paused", "active": "resumed"}[self.status]
        if self.changed:
            return f"campaign {self.campaign} {what}"
        if self.was:
            return (f"campaign {self.campaign} is {self.was}, not {self.status!r}-able; nothing "
                    "changed")
        return f"campaign {self.campaign} was already {self.status}; nothing changed"


def _audit(conn: Conn, who: audit.Who | None, by: str, action: str, row: campaigns.Campaign,
           reason: str) -> None:
    """Record a campaign's status change in the audit trail, in the change's transaction."""
    audit.record_as(conn, who or audit.Who(by), by=by, action=action, target_kind="campaign",
                    target_key=row.key, target_id=row.id, campaign_key=row.key, reason=reason,
                    details={"was": row.status})


def _find(conn: Conn, key: str) -> campaigns.Campaign:
    row = campaigns.campaign_find(conn, key=key)
    if row is None:
        raise CampaignNotFound(f"no campaign {key!r} (the key of a synced campaign file)")
    return row


def pause_campaign(url: str, key: str, reason: str, by: str, *,
                   now: dt.datetime | None = None, who: audit.Who | None = None) -> CampaignChange:
    """Pause a campaign (by key): none of its steps is queued or claimed until it is resumed.

    Idempotent: pausing a paused campaign changes nothing and keeps the first reason.

    :param who: who is authenticated (:class:`outreach.audit.Who`; default ``by`` through
        ``api``): a change is recorded in the audit trail in its own transaction.
    :raises CampaignNotFound: no such campaign.
    :raises ValueError: ``reason`` or ``by`` is empty.
    """
    reason, by = required(reason, "a reason (--reason)"), required(by, "who pauses (--by)")
    with db.transaction(url) as conn:
        row = _find(conn, key)
        done = campaigns.campaign_pause(conn, campaign_id=row.id, reason=reason, by=by, now=now)
        if done:
            _audit(conn, who, by, "pause", row, reason)
    change = CampaignChange(key, bool(done), "paused", done[0].created_at if done else None)
    log.warning("%s", change.attributed(by, reason))
    return change


def resume_campaign(url: str, key: str, by: str, why: str, *,
                    now: dt.datetime | None = None, who: audit.Who | None = None,
                    ) -> CampaignChange:
    """Resume a paused campaign (by key), recording who and why. Its queued steps go out within
    each mailbox's daily cap and pacing; steps that fell due meanwhile are queued by the next
    ``queue-due``.

    :param who: as for :func:`pause_campaign`.
    :raises CampaignNotFound: no such campaign.
    :raises ValueError: ``by`` or ``why`` is empty.
    """
    by, why = required(by, "who resumes (--by)"), required(why, "why (--reason)")
    with db.transaction(url) as conn:
        row = _find(conn, key)
        done = campaigns.campaign_resume(conn, campaign_id=row.id, by=by, why=why, now=now)
        if done:
            _audit(conn, who, by, "resume", row, why)
    change = CampaignChange(key, bool(done), "active", done[0].created_at if done else None)
    log.warning("%s", change.attributed(by, why))
    return change


def campaign_events(url: str, key: str | None = None) -> list[dict[str, Any]]:
    """Return the pause/resume history, newest first: ``{id, campaign_id, key, event
    ('paused'/'resumed'), actor, reason, created_at (UTC)}`` for one campaign or all.

    :raises CampaignNotFound: no such campaign.
    """
    with db.connect(url, autocommit=True) as conn:
        campaign_id = _find(conn, key).id if key is not None else None
        return [asdict(e) for e in campaigns.campaign_event_list(conn, campaign_id=campaign_id)]


_APPROVAL = {
    # verb: (store function, status it needs, status after, past tense)
    "submit": (campaigns.campaign_submit, "draft", "awaiting_approval", "submitted for approval"),
    "approve": (campaigns.campaign_approve, "awaiting_approval", "active", "approved: active"),
    "reject": (campaigns.campaign_reject, "awaiting_approval", "draft", "rejected: back to draft"),
}


class CampaignStateError(ValueError):
    """The campaign is not in the state the change needs (the message says which it is in)."""


def change_status(url: str, key: str, verb: str, by: str, reason: str, *,
                  now: dt.datetime | None = None,
                  content_version: str | None = None,
                  who: audit.Who | None = None) -> CampaignChange:
    """Submit, approve (``approved_by``/``approved_at`` kept) or reject a campaign, recording who, when
    (UTC) and why. One guarded UPDATE each: run twice, the second changes nothing.

    :param verb: ``submit``, ``approve`` or ``reject``.
    :param by: who (the CLI passes the OS user).
    :param reason: why (required for ``reject``).
    :param now: when (UTC; default the database clock).
    :param content_version: ``approve`` only: only if still the campaign's (the one shown).
    :param who: as for :func:`pause_campaign`.
    :raises CampaignNotFound: no such campaign.
    :raises CampaignStateError: another state, or the content changed; nothing changed.
    :raises ValueError: ``by`` or ``reason`` is empty, or an unknown verb."""
    if verb not in _APPROVAL:
        raise ValueError(f"verb must be one of {sorted(_APPROVAL)}, got {verb!r}")
    transition, needs, after, past = _APPROVAL[verb]
    by, reason = required(by, "who (--by)"), required(reason, "a reason (--reason)")
    with db.transaction(url) as conn:
        row = _find(conn, key)
        extra = {"content_version": content_version} if verb == "approve" else {}
        done = transition(conn, campaign_id=row.id, by=by, reason=reason, now=now, **extra)
        if done:
            _audit(conn, who, by, verb, row, reason)
    if not done:
        if content_version is not None and row.content_version != content_version:
            raise CampaignStateError(
                f"campaign {key}: its content changed (campaign content version "
                f"{row.content_version}, shown {content_version}) since it was shown for "
                "approval; nothing changed")
        if row.status == after:
            return CampaignChange(key, False, after, None, past)
        raise CampaignStateError(f"campaign {key} is {row.status!r}; {verb} needs {needs!r} "
                                 "(outreach campaign history KEY shows how it got there)")
    change = CampaignChange(key, True, after, done[0].created_at, past)
    log.info("%s", change.attributed(by, reason))
    return change
