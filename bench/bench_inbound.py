"""Score :func:`outreach.inbound.classify` against sisimai on sisimai's public corpus (issue 23).

``make bench-inbound CORPUS=/path/to/set-of-emails/maildir/bsd`` runs :func:`classify` over every
file the facts name (``bench/inbound/sisimai-facts.json``, derived by
``bench/inbound/derive_facts.py`` from sisimai's own test tables), prints the table and writes it
to ``bench/results/inbound.md``. The messages are not in this repository: clone
github sisimai/set-of-emails and point ``CORPUS`` at its ``maildir/bsd``.

What is scored (the targets are issue 23's "Done when"):

* *bounces recognised*: files sisimai decodes as a failure that we call ``hard_bounce``,
  ``soft_bounce`` or ``sender_block`` (a ``delivery_report`` is not a bounce). Delay warnings
  (every recipient ``Action: delayed``, sisimai: a soft bounce) are counted apart: issue 23
  says a DSN saying ``delayed`` changes nothing, so ours is ``delivery_report``;
* *read as a human reply*: bounces and complaints whose verdict is ``reply`` (they would stop a
  sequence as "replied");
* *recipient exact*: recognised bounces (with every address known to sisimai) whose failed
  addresses are exactly sisimai's;
* *owner agrees*: per recipient of a recognised bounce, our owner against sisimai's reason
  mapped through :func:`outreach.reasons.owner_of`;
* *suppression precision / recall*: recipients we say ``owner=address`` (suppressed at once)
  that sisimai calls ``hardbounce``, and the reverse;
* *complaints*: complaint files recognised with every complainant;
* *exceptions* raised by :func:`classify`, and *messages/s*: classification alone (the files are
  read into memory first), per second of this process's CPU time (one core; the wall time,
  which other work on a shared machine stretches, is printed beside it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "bench" / "inbound" / "sisimai-facts.json"
RESULTS = ROOT / "bench" / "results" / "inbound.md"
BOUNCE_KINDS = frozenset({"hard_bounce", "soft_bounce", "sender_block"})


@dataclass
class Score:
    """Counts of one run (see the module docstring for each figure)."""

    bounces: int = 0
    delay_warnings: int = 0
    recognised: int = 0
    as_reply: int = 0
    recipient_scored: int = 0
    recipient_exact: int = 0
    owner_scored: int = 0
    owner_agree: int = 0
    suppressed: int = 0
    suppressed_hard: int = 0
    hard: int = 0
    hard_suppressed: int = 0
    complaints: int = 0
    complaints_whole: int = 0
    exceptions: int = 0
    messages: int = 0
    seconds: float = 0.0
    wall_seconds: float = 0.0
    misses: dict[str, list[str]] = field(default_factory=dict)

    def miss(self, what: str, name: str) -> None:
        """Record that ``name`` (a corpus file) missed ``what``."""
        self.misses.setdefault(what, []).append(name)


def _owners(verdict: Any) -> dict[str, str]:
    """Our owner per failed address: the per-recipient failures, else the verdict's owner."""
    failures = getattr(verdict, "failures", ()) or ()
    owners = {f.address: f.owner for f in failures}
    for a in verdict.addresses:
        owners.setdefault(a, verdict.owner or "")
    return owners


def score(facts: dict[str, dict], verdicts: dict[str, Any], errors: set[str] | None = None) -> Score:
    """Score ``verdicts`` (file name → :class:`outreach.inbound.Classified`) against ``facts``
    (the ``files`` of the facts document); ``errors`` names the files whose classify raised."""
    from outreach.reasons import owner_of

    s = Score()
    errors = errors or set()
    s.exceptions = len(errors)
    for name, fact in sorted(facts.items()):
        cls, verdict = fact["class"], verdicts.get(name)
        if cls == "unknown":
            continue
        rcpts = fact["recipients"]
        kind = verdict.kind if verdict is not None else "(exception)"
        if cls in ("bounce", "complaint") and kind == "reply":
            s.as_reply += 1
            s.miss("read as a reply", name)
        if cls == "complaint":
            s.complaints += 1
            want = {r["address"] for r in rcpts} - {None}  # None: the report names no one
            if kind == "complaint" and want <= set(verdict.addresses):
                s.complaints_whole += 1
            else:
                s.miss("complaint", f"{name} ({kind})")
            continue
        if cls != "bounce":
            continue
        failures = getattr(verdict, "failures", ()) or ()
        if kind == "delivery_report" and failures and all(f.action == "delayed" for f in failures) \
                and not any(r["hardbounce"] for r in rcpts):
            s.delay_warnings += 1  # issue 23: a DSN saying "delayed" changes nothing
            s.miss("delay warnings (sisimai: a soft bounce)", name)
            continue
        s.bounces += 1
        if kind not in BOUNCE_KINDS:
            s.miss("bounce not recognised", f"{name} ({kind})")
            continue
        s.recognised += 1
        ours = _owners(verdict)
        want = {r["address"] for r in rcpts}
        if None not in want:
            s.recipient_scored += 1
            if set(ours) == want:
                s.recipient_exact += 1
            else:
                s.miss("recipient", f"{name} ours={sorted(ours)} sisimai={sorted(want)}")
        for r in rcpts:
            expected = owner_of(r["reason"])
            got = ours.get(r["address"]) if r["address"] else (
                next(iter(ours.values())) if len(ours) == 1 else None)
            s.owner_scored += 1
            if got == expected:
                s.owner_agree += 1
            else:
                s.miss("owner", f"{name} ours={got} sisimai={r['reason']}->{expected} "
                       f"status={r['status']} ({getattr(verdict, 'reason', None)})")
            if r["hardbounce"]:
                s.hard += 1
                if got == "address":
                    s.hard_suppressed += 1
                else:
                    s.miss("suppression recall", f"{name} ours={got} sisimai={r['reason']}")
            if got == "address":
                s.suppressed += 1
                if r["hardbounce"]:
                    s.suppressed_hard += 1
                else:
                    s.miss("suppression precision", f"{name} sisimai={r['reason']}")
    return s


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f} %" if d else "n/a"


def table(s: Score) -> list[tuple[str, str, str, bool]]:
    """The rows ``(figure, measured, target, met)`` of a run."""
    rate = s.messages / s.seconds if s.seconds else 0.0
    return [
        ("bounces recognised", f"{s.recognised}/{s.bounces} ({_pct(s.recognised, s.bounces)})",
         "≥ 98 %", s.bounces > 0 and s.recognised >= 0.98 * s.bounces),
        ("delay warnings (Action: delayed), not scored", str(s.delay_warnings), "-", True),
        ("bounces/complaints read as a human reply", str(s.as_reply), "0", s.as_reply == 0),
        ("recipient exact", f"{s.recipient_exact}/{s.recipient_scored} "
         f"({_pct(s.recipient_exact, s.recipient_scored)})", "≥ 99 %",
         s.recipient_exact >= 0.99 * s.recipient_scored),
        ("owner agrees with sisimai's reason", f"{s.owner_agree}/{s.owner_scored} "
         f"({_pct(s.owner_agree, s.owner_scored)})", "≥ 95 %", s.owner_agree >= 0.95 * s.owner_scored),
        ("suppression precision", f"{s.suppressed_hard}/{s.suppressed} "
         f"({_pct(s.suppressed_hard, s.suppressed)})", "≥ 99 %",
         s.suppressed_hard >= 0.99 * s.suppressed),
        ("suppression recall", f"{s.hard_suppressed}/{s.hard} ({_pct(s.hard_suppressed, s.hard)})",
         "≥ 95 %", s.hard_suppressed >= 0.95 * s.hard),
        ("complaints with every complainant", f"{s.complaints_whole}/{s.complaints}", "18/18",
         s.complaints > 0 and s.complaints_whole == s.complaints),
        ("exceptions", str(s.exceptions), "0", s.exceptions == 0),
        ("messages/s", f"{rate:.0f}", "≥ 200", rate >= 200),
    ]


def render(s: Score, facts_doc: dict, corpus: Path) -> str:
    """The Markdown of ``bench/results/inbound.md``: the table, then each miss by figure."""
    src = facts_doc.get("source", {})
    lines = ["# Inbound classification against sisimai (issue 23)", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; corpus `{corpus}` "
             f"(set-of-emails {src.get('set-of-emails', '?')[:7]}), truth "
             f"`bench/inbound/sisimai-facts.json` (go-sisimai {src.get('go-sisimai', '?')[:7]}, "
             f"p5-sisimai {src.get('p5-sisimai', '?')[:7]}); {s.messages} messages in "
             f"{s.seconds:.2f} s of CPU ({s.wall_seconds:.2f} s wall).", "",
             "| figure | measured | target | met |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {'yes' if ok else 'NO'} |" for a, b, c, ok in table(s)]
    for what, names in sorted(s.misses.items()):
        lines += ["", f"## {what} ({len(names)})", ""] + [f"- {n}" for n in names]
    return "\n".join(lines) + "\n"


def run(corpus: Path, facts_path: Path = FACTS) -> tuple[Score, dict]:
    """Classify every file the facts name under ``corpus``; return the score and the facts."""
    import logging

    from outreach.inbound import classify

    logging.basicConfig(level=logging.INFO)  # as a task log is: flufl.bounce must stay quiet
    doc = json.loads(facts_path.read_text())
    raw = {n: (corpus / n).read_bytes() for n in doc["files"] if (corpus / n).exists()}
    missing = sorted(set(doc["files"]) - set(raw))
    if missing:
        raise SystemExit(f"{corpus}: {len(missing)} files of the facts are missing "
                         f"(first: {missing[0]}); point CORPUS at set-of-emails/maildir/bsd")
    verdicts, errors = {}, set()
    start, wall = time.process_time(), time.perf_counter()
    for name, data in raw.items():
        try:
            verdicts[name] = classify(data)[1]
        except Exception as exc:  # noqa: BLE001 - counted and named, the rest still scored
            errors.add(name)
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    seconds, wall = time.process_time() - start, time.perf_counter() - wall
    s = score(doc["files"], verdicts, errors)
    s.messages, s.seconds, s.wall_seconds = len(raw), seconds, wall
    return s, doc


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write ``bench/results/inbound.md``; exit 0 (the table says what
    was met)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", type=Path, help="set-of-emails/maildir/bsd")
    ap.add_argument("--facts", type=Path, default=FACTS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    s, doc = run(args.corpus, args.facts)
    for a, b, c, ok in table(s):
        print(f"{a:45} {b:>22}  target {c:7} {'met' if ok else 'NOT MET'}")
    args.out.write_text(render(s, doc, args.corpus))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
