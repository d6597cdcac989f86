"""Content versions: which copy a message was built from.

A content version identifies what shapes a step's message apart from the lead: the template's
source files (``<template>.txt.j2`` and ``.html.j2``), the subject template, whether the step is
sent in the first step's thread, and the campaign's key and name (the step tag, Feedback-ID and
``{{ campaign.name }}``). It is stored with every send-log row (``outreach.send_log
.content_version``, migration 0103), so an edit of an active campaign's template shows as a new
version from the first message built from it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from outreach.paths import templates_dir

if TYPE_CHECKING:
    from outreach.campaign import Campaign

_SOURCES: dict[tuple[str, int, int], str] = {}


def _source(path: Path) -> str:
    """The file's text, read once per (path, modification time, size); ``""`` if it is missing."""
    try:
        st = path.stat()
    except OSError:
        return ""
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _SOURCES:
        _SOURCES[key] = path.read_text(encoding="utf-8")
    return _SOURCES[key]


def content_version(template: str, subject: str | None, *, thread: bool = False,
                    campaign_key: str | None = None, campaign_name: str | None = None,
                    variant: str | None = None, directory: Path | None = None) -> str:
    """Return the content version of a step (or a transactional template): the first 16 hex
    digits of a SHA-256 over the template's two source files, ``subject`` (the Jinja2 string,
    ``None`` for a template's own subject), ``thread`` and the campaign's key and name, and the
    A/B variant's name when there is one (``template`` and ``subject`` are then the variant's
    copy; migration 0126), so two variants never share a version. A step without variants keeps
    the version it had before 0126.

    :param directory: the templates folder (default :func:`outreach.paths.templates_dir`).
    """
    folder = directory or templates_dir()
    material = {"template": template, "subject": subject, "thread": thread,
                "campaign": [campaign_key, campaign_name],
                "txt": _source(folder / f"{template}.txt.j2"),
                "html": _source(folder / f"{template}.html.j2")}
    if variant is not None:
        material["variant"] = variant
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def campaign_content_version(campaign: Campaign, *, directory: Path | None = None) -> str:
    """Return the content version of a whole campaign as synced: the first 16 hex digits of a
    SHA-256 over each step's :func:`content_version` with its position, ``delay_days`` and
    ``requires``, each of its A/B variants' names and :func:`content_version`s, and the
    campaign's calendar (``business_days``, holiday ``country``, ``blackout_dates``: they move
    when each message goes out). Kept in
    ``outreach.campaigns.content_version`` (migration 0127); another value
    for an approved campaign sends it back to awaiting approval (a second approval, issue 24
    item 4: "a second approval is needed when an active campaign's templates or steps change").

    :param directory: the templates folder (default :func:`outreach.paths.templates_dir`).
    """
    steps = []
    for i, step in enumerate(campaign.steps, start=1):
        entry: dict[str, object] = {
            "position": i, "delay_days": step.delay_days, "requires": sorted(set(step.requires)),
            "content": content_version(step.template, step.subject, thread=step.thread,
                                       campaign_key=campaign.key, campaign_name=campaign.name,
                                       directory=directory)}
        if step.variants:
            # Each A/B variant's copy is what its leads get (0126): editing, adding or dropping
            # one is a content change that needs a second approval. Absent without variants, so
            # a campaign without them keeps the version it had.
            entry["variants"] = [
                [name, content_version(template, subject, thread=step.thread,
                                       campaign_key=campaign.key, campaign_name=campaign.name,
                                       variant=name, directory=directory)]
                for name, template, subject in step.copies()]
        steps.append(entry)
    material: object = steps
    calendar = _calendar(campaign)
    if calendar:
        # A calendar moves every step's send day (working-day delays, holidays and blackout
        # dates are outside every send window, 0137), so a change needs a second approval.
        # Absent for a campaign on the default calendar, which keeps the version it had.
        material = {"steps": steps, "calendar": calendar}
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _calendar(campaign: Campaign) -> dict[str, object]:
    """The campaign's calendar settings that differ from the default (none: ``{}``), as synced
    (country upper-case, blackout dates sorted without repeats)."""
    calendar: dict[str, object] = {}
    if campaign.business_days:
        calendar["business_days"] = True
    if campaign.country:
        calendar["country"] = campaign.country.upper()
    if campaign.blackout_dates:
        calendar["blackout_dates"] = sorted({d.isoformat() for d in campaign.blackout_dates})
    return calendar
