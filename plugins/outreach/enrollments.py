"""Stopping an enrolment: a lead gets nothing more in that campaign.

One SQL function, ``outreach.stop_enrollment`` (0012), stops it with who, why and when and
cancels its queued steps in the caller's transaction; rows already ``sending`` are cancelled by
the pre-send check (``email_cancel_stopped``). A stop is final for that campaign."""

from __future__ import annotations

from dataclasses import dataclass

from outreach import audit, db
from outreach.addresses import EmailNotValidError, normalize_address
from outreach.logutil import log, mask
from outreach.mailboxes import required  # the same rule as a mailbox pause
from outreach.store import Conn, RowMissing
from outreach.store import enrollments as store

STOP_STATUSES = ("stopped", "replied")


class EnrollmentNotFound(LookupError):
    """The lead is not enrolled in that campaign (or either does not exist)."""


def stop_enrollment(conn: Conn, enrollment_id: int, status: str, reason: str, by: str) -> int:
    """Stop one enrolment and cancel its queued steps, inside the caller's transaction.

    :param status: ``stopped`` (an operator) or ``replied`` (a reply was read).
    :param reason: why (non-empty), kept on the enrolment.
    :param by: who (non-empty), kept on the enrolment.
    :returns: how many queued emails were cancelled (an earlier stop keeps its status and reason).
    :raises psycopg.errors.NoDataFound: no enrolment has that id.
    :raises psycopg.errors.InvalidParameterValue: a bad ``status``, or an empty reason or by."""
    return store.enrollment_stop(conn, enrollment_id=enrollment_id, status=status, reason=reason,
                                 by=by)


@dataclass(frozen=True)
class LeadStop:
    """Outcome of :func:`stop_lead`: the ``enrollment_id``, the lead's ``address`` (masked), the
    ``campaign`` key, whether it ``changed`` now (``False``: it had already stopped), its
    ``status`` and the stop's ``by``/``reason`` as kept, and how many queued emails were
    ``cancelled``."""

    enrollment_id: int
    address: str
    campaign: str
    changed: bool
    status: str
    by: str | None
    reason: str | None
    cancelled: int

    def line(self) -> str:
        """Return a one-line description for logs and the CLI."""
        head = f"lead {self.address} in campaign {self.campaign} (enrolment {self.enrollment_id})"
        if self.changed:
            return f"{head} stopped; cancelled {self.cancelled} queued email(s)"
        return (f"{head} was already {self.status} (by {self.by}: {self.reason}); "
                f"cancelled {self.cancelled} queued email(s)")


def stop_lead(url: str, address: str, campaign_key: str, reason: str, by: str, *,
              who: audit.Who | None = None) -> LeadStop:
    """Stop a lead's enrolment in one campaign; a second stop changes nothing.

    :param who: who is authenticated (default ``by`` through ``api``): one audit row.
    :raises ValueError: a bad address, or an empty ``reason`` or ``by``.
    :raises EnrollmentNotFound: the lead is not enrolled in that campaign."""
    reason, by = required(reason, "a reason (--reason)"), required(by, "who stops (--by)")
    try:
        email = normalize_address(address)
    except EmailNotValidError as exc:
        raise ValueError(f"invalid address: {exc}") from None
    with db.transaction(url) as conn:
        before = store.enrollment_find(conn, email=email, campaign_key=campaign_key)
        if before is None:
            raise EnrollmentNotFound(f"{mask(email)} is not enrolled in campaign {campaign_key!r}")
        cancelled = stop_enrollment(conn, before.id, "stopped", reason, by)
        after = store.enrollment_find(conn, email=email, campaign_key=campaign_key)
        if after is None:  # never: an enrolment is not deleted
            raise RowMissing("enrollment_find")
        if before.status == "active":
            audit.record_as(conn, who or audit.Who(by), by=by, action="stop",
                            target_kind="enrollment", target_key=mask(email), target_id=before.id,
                            campaign_key=campaign_key, reason=reason,
                            details={"cancelled": cancelled})
    result = LeadStop(after.id, mask(email), campaign_key, before.status == "active",
                      after.status, after.stopped_by, after.stop_reason, cancelled)
    log.warning("%s by %s: %s", result.line(), by, reason)
    return result
