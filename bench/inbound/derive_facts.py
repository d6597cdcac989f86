r"""Derive ``sisimai-facts.json``: what sisimai says of each message of its own public corpus.

The facts are sisimai's, taken from two places (never the messages themselves, which whoever
runs the benchmark fetches: github sisimai/set-of-emails, ``maildir/bsd``):

* go-sisimai's test tables (``fact/*_test.go``: per file and recipient the status, reply code,
  reason and hard/soft flag that sisimai's own tests assert) — the truth where they name a file;
* p5-sisimai run over the corpus (``Sisimai->rise``, needs Perl with ``JSON`` and
  ``Class::Accessor::Lite``: Debian's ``libjson-perl libclass-accessor-lite-perl``) — the
  recipient addresses, which the tables do not carry, and the facts of files the tables omit.

Usage (each argument a local clone)::

    python bench/inbound/derive_facts.py --go-sisimai DIR --p5-sisimai DIR \
        --corpus DIR/maildir/bsd > bench/inbound/sisimai-facts.json

An address sisimai could not find (its stand-in ``…@libsisimai.org.invalid``, or a file p5 did
not decode) is ``null``.

Output: ``{"source": {...commits}, "files": {"lhost-postfix-01.eml": {"class": "bounce",
"recipients": [{"address", "status", "reason", "hardbounce"}...], "feedback_type"}}}``, with
``class`` one of ``bounce``, ``complaint`` (reason ``feedback``), ``auto_reply`` (``vacation``),
``delivery_report`` (``delivered``) or ``unknown`` (sisimai decodes nothing: not scored).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

_FUNC = re.compile(r"^func Test(Lhost|Rhost)?(\w+)\(t \*testing\.T\)", re.M)
_ROW = re.compile(r'\{"(\d+)",\s*(\d+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*(true|false),\s*"([^"]*)"\}')
_PUBLIC = re.compile(r"publiclist := \[\]\[\]IsExpected\{(.*?)\n\s*\}; EngineTest\(t, \"([^\"]+)\"", re.S)

_P5 = r"""
use Sisimai; use JSON;
my $v = Sisimai->rise($ARGV[0], delivered => 1, vacation => 1) || [];
my @o = map { { file => (split m{/}, $_->origin)[-1], recipient => $_->recipient->address,
  reason => $_->reason, hardbounce => $_->hardbounce + 0, status => $_->deliverystatus,
  feedback_type => $_->feedbacktype } } @$v;
print JSON->new->canonical->encode(\@o);
"""


def go_tables(root: Path) -> dict[str, list[dict]]:
    """Return ``file name -> [row per recipient]`` from go-sisimai's ``fact/*_test.go``."""
    out: dict[str, list[dict]] = {}
    for path in sorted((root / "fact").glob("*_test.go")):
        text = path.read_text()
        funcs = list(_FUNC.finditer(text))
        for block in _PUBLIC.finditer(text):
            func = [f for f in funcs if f.start() < block.start()][-1]
            prefix = {"Lhost": "lhost-", "Rhost": "rhost-"}.get(func.group(1) or "", "")
            engine = block.group(2).lower()
            for label, _index, status, code, reason, hard, another in _ROW.findall(block.group(1)):
                out.setdefault(f"{prefix}{engine}-{label}.eml", []).append(
                    {"status": status, "reply_code": code, "reason": reason,
                     "hardbounce": hard == "true", "another": another})
    return out


def p5_facts(root: Path, corpus: Path) -> dict[str, list[dict]]:
    """Return ``file name -> [fact per recipient]`` by running p5-sisimai over ``corpus``."""
    done = subprocess.run(["perl", "-I", str(root / "lib"), "-e", _P5, str(corpus)],
                          check=True, capture_output=True, text=True)
    out: dict[str, list[dict]] = {}
    for fact in json.loads(done.stdout):
        out.setdefault(fact["file"], []).append(fact)
    return out


def _class(reasons: list[str]) -> str:
    if not reasons:
        return "unknown"
    if all(r == "feedback" for r in reasons):
        return "complaint"
    if all(r == "vacation" for r in reasons):
        return "auto_reply"
    if all(r in ("delivered", "delayed") for r in reasons):
        return "delivery_report"
    return "bounce"


def derive(go: Path, p5: Path, corpus: Path) -> dict:
    """Merge the tables and p5's run into the facts document (see the module docstring)."""
    tables, run = go_tables(go), p5_facts(p5, corpus)
    files: dict[str, dict] = {}
    for path in sorted(corpus.glob("*.eml")):
        name = path.name
        rows, facts = tables.get(name, []), run.get(name, [])
        recipients = []
        for i, row in enumerate(rows or facts):
            fact = facts[i] if i < len(facts) else {}
            address = (fact.get("recipient") or "").lower() or None
            if address and address.endswith("@libsisimai.org.invalid"):
                address = None  # sisimai's stand-in when the report names no one
            recipients.append({
                "address": address,
                "status": row.get("status") or None,
                "reason": row["reason"],
                "hardbounce": bool(row["hardbounce"]),
            })
        files[name] = {
            "class": _class([r["reason"] for r in recipients]),
            "recipients": recipients,
            "truth": "go-sisimai tables" if rows else "p5-sisimai run" if facts else "none",
        }
        feedback = next((r.get("another") for r in rows if r.get("another")), None) or next(
            (f.get("feedback_type") for f in facts if f.get("feedback_type")), None)
        if feedback and files[name]["class"] == "complaint":
            files[name]["feedback_type"] = feedback

    def head(repo: Path) -> str:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "unknown"
    return {"source": {"go-sisimai": head(go), "p5-sisimai": head(p5),
                       "set-of-emails": head(corpus.parent.parent)},
            "files": files}


def main(argv: list[str] | None = None) -> int:
    """Write the facts document to stdout; exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--go-sisimai", type=Path, required=True)
    ap.add_argument("--p5-sisimai", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True, help="set-of-emails/maildir/bsd")
    args = ap.parse_args(argv)
    json.dump(derive(args.go_sisimai, args.p5_sisimai, args.corpus), sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
