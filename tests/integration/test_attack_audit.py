"""Attack: a bulk do-not-contact import is an operator decision without an audit row."""

from __future__ import annotations

import pytest

from outreach.suppression import import_suppressions
from support.flow import scalar
from support.paths import DNC


@pytest.mark.xfail(strict=True, reason="attack finding: import_suppressions writes no"
                   " outreach.audit_log row (audit.record is called by suppress() only with who)")
def test_a_bulk_suppression_import_leaves_an_audit_row(db_url):
    import_suppressions(db_url, DNC)
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") > 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.audit_log WHERE action = 'suppress'") > 0
