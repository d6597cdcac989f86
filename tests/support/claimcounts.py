"""What the daily cap counts, two ways: COUNTED from the email rows (the rule before migration
0081), KEPT from outreach.mailbox_claim_counts (the counter the triggers keep); equal when the
counter is right."""
from __future__ import annotations

COUNTED = """
SELECT e.mailbox_id, outreach.claim_quarter(e.claimed_at) AS quarter, count(*)::integer AS claimed
FROM outreach.emails e
WHERE e.claimed_at IS NOT NULL AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
GROUP BY 1, 2"""
KEPT = "SELECT mailbox_id, quarter, claimed FROM outreach.mailbox_claim_counts WHERE claimed <> 0"
