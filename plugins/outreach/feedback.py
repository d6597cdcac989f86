"""The Feedback-ID header and the feedback-loop identifiers Postmaster Tools reports on.

Gmail's feedback loop reads ``Feedback-ID: a:b:c:SenderId`` and reports spam rates for each of the
identifier fields separately (Gmail feedback loop help; Postmaster Tools API v2 metric
``FEEDBACK_LOOP_SPAM_RATE`` with the filter ``feedback_loop_id = "<id>"``). Ours is
``<campaign key>:m<mailbox id>:cold:<SenderId>``: the second field identifies the mailbox, stable
for as long as the mailbox exists, so Postmaster's per-id figure is the mailbox's own spam rate.
The sender and the Postmaster rule both use these two functions, so they cannot drift apart.
"""

from __future__ import annotations


def mailbox_feedback_loop_id(mailbox_id: int) -> str:
    """Return the feedback-loop identifier of a mailbox: ``"m<id>"`` (e.g. ``"m3"``)."""
    return f"m{int(mailbox_id)}"


def feedback_id(campaign_key: str, mailbox_id: int, sender_id: str, kind: str = "cold") -> str:
    """Return the Feedback-ID header value ``<campaign>:m<mailbox id>:<kind>:<sender id>``.

    :param campaign_key: the campaign's slug (no ``:``; see :class:`outreach.campaign.Campaign`),
        or the template name of transactional mail.
    :param mailbox_id: the sending mailbox's id.
    :param sender_id: ``OUTREACH_FEEDBACK_SENDER_ID`` (5–15 characters, stable per stream).
    :param kind: the message type: ``cold`` (campaigns) or ``transactional``, so Gmail's feedback
        loop reports the two streams apart.
    """
    return f"{campaign_key}:{mailbox_feedback_loop_id(mailbox_id)}:{kind}:{sender_id}"
