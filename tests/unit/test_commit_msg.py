"""The commit-msg hook (``tools/commit_msg.py``, ``.pre-commit-config.yaml``) run as git runs it:
a file path as its one argument, its exit code and stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from support.paths import ROOT

CHECKER = ROOT / "tools" / "commit_msg.py"

GOOD = """Render templates in Jinja's sandbox

A template is reviewed, but the lead data it renders is not: the sandbox
keeps a field from reaching Python attributes.
# Please enter the commit message for your changes. Lines starting
# with '#' will be ignored, and an empty message aborts the commit.
"""


def check(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run([sys.executable, str(CHECKER), str(path)], capture_output=True, text=True,
                          timeout=60)


def test_a_good_message_passes(tmp_path):
    for message in (GOOD, "Add the schema reference\n", "Merge branch 'h-docs'\n"):
        result = check(tmp_path, message)
        assert (result.returncode, result.stderr) == (0, ""), message


def test_a_bad_message_fails_naming_each_problem(tmp_path):
    subject = "Bench send path: ours' claim, handoff stamp and ledger steps are timed in the run."
    result = check(tmp_path, subject + "\nThe body starts on line 2.\n")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'COMMIT_EDITMSG'}: subject is {len(subject)} characters, at most 72: "
        "say what changed, put the why in the body",
        f"{tmp_path / 'COMMIT_EDITMSG'}: subject ends with a period",
        f"{tmp_path / 'COMMIT_EDITMSG'}: line 2 must be blank: a blank line between the subject "
        "and the body"]


def test_seventy_two_characters_pass_and_seventy_three_fail(tmp_path):
    assert check(tmp_path, "x" * 72 + "\n").returncode == 0
    assert check(tmp_path, "x" * 73 + "\n").returncode == 1


def test_an_empty_message_and_the_verbose_diff_are_handled(tmp_path):
    assert check(tmp_path, "# only a comment\n\n").returncode == 1
    verbose = ("Add a hook\n\n# ------------------------ >8 ------------------------\n"
               "diff --git a/x b/x\n" + "+" + "y" * 100 + "\n")
    assert check(tmp_path, verbose).returncode == 0


def test_pre_commit_runs_it_at_the_commit_msg_stage():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert "commit-msg" in config["default_install_hook_types"]
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert hooks["commit-msg"]["stages"] == ["commit-msg"]
    assert "tools/commit_msg.py" in hooks["commit-msg"]["entry"]
