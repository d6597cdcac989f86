"""What send_sessions raises when several of its sessions lost the database (an attack found the
task's one line naming one session's rows of four): one BatchAborted with every session's line
and ids (outreach.send.merged_aborts)."""

from __future__ import annotations

from outreach.send import BatchAborted, merged_aborts


def test_several_lost_databases_make_one_error_naming_every_row():
    a = BatchAborted("database connection lost at stage SEND (mailbox 1): ids [1, 2] stay "
                     "'sending'", released=[5], stuck=[1, 2])
    b = BatchAborted("database connection lost at stage SEND (mailbox 2): ids [3] stay "
                     "'sending'", released=[6, 7], stuck=[3])
    merged = merged_aborts([a, b], 4)
    assert isinstance(merged, BatchAborted)
    assert str(merged).startswith("2 of 4 SMTP sessions lost the database: database connection")
    assert "(mailbox 1)" in str(merged) and "(mailbox 2)" in str(merged)
    assert "\n" not in str(merged)
    assert (merged.stage, merged.released, merged.stuck) == ("SEND", [5, 6, 7], [1, 2, 3])


def test_one_error_or_an_interruption_first_is_raised_as_it_is():
    a = BatchAborted("lost", stuck=[1])
    assert merged_aborts([a], 2) is a
    interrupt = KeyboardInterrupt()
    assert merged_aborts([interrupt, a, BatchAborted("lost too")], 2) is interrupt
