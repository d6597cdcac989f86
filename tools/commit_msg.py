"""Check a commit message: the commit-msg hook of ``.pre-commit-config.yaml`` (CONTRIBUTING.md,
"Commits").

Rules, so that ``git log --oneline`` stays readable: a subject line of at most 72 characters,
without a trailing period; when there is a body, a blank line between the subject and it. Lines
git strips (``#`` comments, everything below the ``git commit -v`` scissors line) are ignored, and
so are the messages git writes itself (``Merge …``, ``Revert "…"``, ``fixup!``/``squash!``).

Usage: ``python tools/commit_msg.py .git/COMMIT_EDITMSG`` — exit 0 when the message is fine, else
1 with one line per problem on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72
"""Characters a subject may have: what ``git log --oneline`` and GitHub show without cutting."""

SCISSORS = "# ------------------------ >8 ------------------------"
GIT_WRITTEN = ("Merge ", 'Revert "', "fixup! ", "squash! ", "amend! ")


def problems(message: str) -> list[str]:
    """Return what is wrong with ``message`` (the text git hands the hook), one line each; an
    empty list when it is fine."""
    lines = []
    for line in message.splitlines():
        if line.startswith(SCISSORS):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    if subject.startswith(GIT_WRITTEN):
        return []
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"subject is {len(subject)} characters, at most {MAX_SUBJECT}: "
                     "say what changed, put the why in the body")
    if subject.endswith("."):
        found.append("subject ends with a period")
    if len(lines) > 1 and lines[1].strip():
        found.append("line 2 must be blank: a blank line between the subject and the body")
    return found


def main(argv: list[str]) -> int:
    """Check the message file named by ``argv[0]``; return the exit code."""
    if len(argv) != 1:
        print("usage: commit_msg.py COMMIT_MSG_FILE", file=sys.stderr)
        return 2
    path = Path(argv[0])
    found = problems(path.read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"{path}: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
