"""The Feedback-ID header and the feedback-loop identifiers Postmaster Tools reports on.

Gmail reports spam rates per field of ``Feedback-ID: a:b:c:SenderId`` (Gmail feedback loop help;
Postmaster API ``FEEDBACK_LOOP_SPAM_RATE``). Ours is ``<campaign>:m<mailbox id>:cold:<SenderId>``,
so the per-id figure is the mailbox's own; the sender and the Postmaster rule share these functions."""

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
