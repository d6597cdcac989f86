"""A FIFO swapped in after the path was checked is refused on the opened descriptor.

``regular_file`` checks the path with ``stat``; between that check and the open a FIFO can take
the file's place (issue 31's review). ``open_regular`` opens without blocking and checks the
descriptor itself, so the import fails in one line instead of waiting for a writer forever.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from outreach import leadcsv
from outreach.leadcsv import LeadsCsv
from outreach.leadfile import ImportFileError, open_regular


def _in_thread(fn):
    """Run ``fn`` in a daemon thread; return (finished, exception or result)."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(_catch(fn)), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # blocked on the FIFO: give it a writer so the thread can end
        with open(fn.fifo, "w"):  # type: ignore[attr-defined]
            pass
        t.join(5)
        return False, None
    return True, out[0]


def _catch(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "leads.csv"
    os.mkfifo(fifo)

    def go():
        return open_regular(fifo, "rb")

    go.fifo = fifo  # type: ignore[attr-defined]
    finished, res = _in_thread(go)
    assert finished, "opening the FIFO blocked"
    assert isinstance(res, ImportFileError) and "not a regular file" in str(res), res


def test_a_fifo_swapped_in_after_the_check_is_refused(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "leads.csv"
    path.write_text("email\na@example.com\n")
    checked = leadcsv.regular_file

    def check_then_swap(p: Path, shown=None):  # the race: the check passes, then a FIFO
        out = checked(p, shown)
        p.unlink()
        os.mkfifo(p)
        return out

    monkeypatch.setattr(leadcsv, "regular_file", check_then_swap)  # where LeadsCsv checks

    def go():
        return LeadsCsv(path)

    go.fifo = path  # type: ignore[attr-defined]
    finished, res = _in_thread(go)
    assert finished, "the import blocked on a FIFO swapped in after the check"
    assert isinstance(res, ImportFileError) and "leads.csv" in str(res), res


def test_open_regular_reads_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("email\n")
    with open_regular(path, "r", encoding="utf-8") as f:
        assert f.read() == "email\n"


def test_an_unknown_encoding_is_its_own_error_not_a_closed_descriptor(tmp_path: Path) -> None:
    # open() closes the descriptor when it fails; closing it again could close another file's.
    path = tmp_path / "x.csv"
    path.write_text("email\n")
    try:
        open_regular(path, "r", encoding="no-such-codec")
    except LookupError:
        pass
    else:
        raise AssertionError("no error for an unknown codec")
