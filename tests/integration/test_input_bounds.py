"""Bounded inputs of the importers (issue 31, item 2): a file without line breaks, a named pipe
or a device inside an import folder is refused in bounded memory and time, naming the file (and
the line), and the rest of a source folder still imports.

Memory is measured as the peak RSS of the ``outreach import-leads`` child process (``os.wait4``
returns that child's own resource usage). The process itself (Python, pydantic, psycopg, Airflow
for the connection lookup, the campaign load) peaks at 140–230 MB before it reads a byte, so the
300 MB line is held to :data:`READ_MARGIN_MB` above the same command refusing a file it never
reads (a FIFO); before the bound a 300 MB line took 755 MB. :data:`RSS_LIMIT_MB` bounds both.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from outreach.leadfile import MAX_ROW_CHARS, ImportFileError
from outreach.sources import import_source
from outreach.suppression import import_suppressions
from support.flow import cli_env, outreach_cmd, scalar
from support.paths import MAILBOXES
from support.sources import drop, file_campaign

RSS_LIMIT_MB = 400
"""Peak RSS any refused import may reach (MB)."""
READ_MARGIN_MB = 64
"""What reading up to the row cap (1,048,576 characters) may add to the process's own peak (MB)."""
TIME_LIMIT_S = 60
"""Wall seconds it may take (the machine is shared; it takes a few seconds, mostly start-up)."""


def run_measured(args: list[str], env: dict, cwd) -> tuple[int, str, float, float]:
    """Run ``outreach ARGS``; return (exit code, stderr, peak RSS in MB, wall seconds).

    :raises subprocess.TimeoutExpired: it ran longer than :data:`TIME_LIMIT_S` (it is killed).
    """
    err = cwd / "stderr.txt"
    start = time.monotonic()
    with err.open("w") as f:
        proc = subprocess.Popen(outreach_cmd(*args), env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=f)
    killer = threading.Timer(TIME_LIMIT_S, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - start
    if seconds >= TIME_LIMIT_S:
        raise subprocess.TimeoutExpired(args, TIME_LIMIT_S)
    return proc.returncode, err.read_text(), usage.ru_maxrss / 1024, seconds  # ru_maxrss: KiB


@pytest.fixture
def folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    return data


def test_a_300_mb_file_on_one_line_is_refused_in_bounded_memory(db_url, sink, tmp_path, folder):
    big = folder / "one-line.csv"
    with big.open("wb") as f:  # "Email,aaaa…": a header that never ends
        f.write(b"Email,")
        block = b"a" * (1 << 20)
        for _ in range(300):
            f.write(block)
    os.mkfifo(folder / "unread.csv")  # the baseline: the same command, nothing read
    try:
        env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(folder))
        _, _, baseline, _ = run_measured(["import-leads", "--csv", "unread.csv"], env, cwd=folder)
        code, err, rss, seconds = run_measured(["import-leads", "--csv", "one-line.csv"], env,
                                               cwd=folder)
    finally:
        big.unlink()
    print(f"300 MB single line: refused in {seconds:.1f} s, peak RSS {rss:.0f} MB "
          f"(the command reading nothing: {baseline:.0f} MB)")
    assert rss < baseline + READ_MARGIN_MB, f"peak RSS {rss:.0f} MB, {baseline:.0f} MB unread"
    assert rss < RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB (limit {RSS_LIMIT_MB} MB)"
    assert code != 0, err
    assert "Traceback" not in err, err
    assert (f"one-line.csv, line 1: a row longer than {MAX_ROW_CHARS:,} characters" in err), err
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0


def test_a_long_row_after_good_ones_names_its_lines_and_imports_nothing(db_url, folder,
                                                                         monkeypatch):
    from outreach.leadfile import MAX_FIELD_CHARS
    from outreach.leads import import_leads
    from support.paths import CAMPAIGN

    # Eleven quoted fields of 100,000 characters over many lines: each under the field limit,
    # the row together over the row limit.
    field = '"' + "y\n" * 50_000 + '"'
    assert len(field) < MAX_FIELD_CHARS and 11 * len(field) > MAX_ROW_CHARS
    path = folder / "leads.csv"
    path.write_text("Email,First Name\nok@acme.example,Ok\n" + ",".join([field] * 11) + "\n")
    monkeypatch.setenv("OUTREACH_IMPORT_ROOTS", str(folder))
    with pytest.raises(ImportFileError, match=r"leads\.csv, lines 3–\d+ \(one quoted row\): "
                       r"a row longer than"):
        import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0


def test_a_fifo_is_refused_without_being_opened(db_url, sink, tmp_path, folder):
    os.mkfifo(folder / "pipe.csv")  # nobody writes: opening it for reading would block
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(folder))
    code, err, rss, seconds = run_measured(["import-leads", "--csv", "pipe.csv"], env, cwd=folder)
    assert code != 0
    assert "pipe.csv: a named pipe (FIFO), not a regular file" in err, err
    assert rss < RSS_LIMIT_MB and seconds < TIME_LIMIT_S
    code, err, _, _ = run_measured(["import-leads", "--csv", "leads.csv", "--suppressions",
                                    "pipe.csv"], env, cwd=folder)
    assert code != 0 and "pipe.csv: a named pipe (FIFO)" in err, err


def test_a_device_behind_a_symlink_is_refused(db_url, folder, monkeypatch):
    (folder / "zero.csv").symlink_to("/dev/zero")  # resolves outside the root: refused there
    monkeypatch.setenv("OUTREACH_IMPORT_ROOTS", f"{folder},/dev")
    with pytest.raises(ImportFileError, match=r"zero\.csv: a device, not a regular file"):
        import_suppressions(db_url, folder / "zero.csv")


def test_a_fifo_in_a_source_folder_is_named_and_the_rest_imports(db_url, tmp_path):
    inbox = tmp_path / "inbox"
    drop(inbox, "a.csv", 3)
    os.mkfifo(inbox / "b.csv")
    drop(inbox, "c.csv", 2, start=100)
    campaign = file_campaign(tmp_path / "campaigns", f"file://{inbox}/*.csv")
    done: list[BaseException | None] = []

    def run() -> None:
        try:
            import_source(db_url, campaign, MAILBOXES)
            done.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            done.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TIME_LIMIT_S)
    if worker.is_alive():  # it blocks on the FIFO: unblock it so the session can end
        with open(inbox / "b.csv", "wb"):
            pass
        worker.join(10)
        pytest.fail("the import opened the FIFO and blocked")
    [exc] = done
    assert isinstance(exc, ImportFileError), exc
    assert "1 object(s) of file://" in str(exc) and "b.csv" in str(exc)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 5
