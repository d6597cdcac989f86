"""Content versions: which copy a message was built from.

A version covers what shapes a step's message apart from the lead (template files, subject,
thread flag, campaign key and name); stored with every send-log row (0103), so an edit of an
active campaign shows as a new version from its first message."""

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
    """Return a step's (or transactional template's) content version: 16 hex digits of SHA-256 over the
    two template files, ``subject``, ``thread``, the campaign's key and name, and the variant's name.

    Two variants never share a version; a step without variants keeps its pre-0126 version.

    :param directory: the templates folder (default :func:`outreach.paths.templates_dir`)."""
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
    """Return a whole campaign's content version: 16 hex digits of SHA-256 over each step's
    :func:`content_version`, position, ``delay_days``, ``requires``, variants and the calendar.

    Kept in ``outreach.campaigns.content_version`` (0127); a new value for an approved campaign sends
    it back to awaiting approval (issue 24, item 4: a second approval).

    :param directory: the templates folder (default :func:`outreach.paths.templates_dir`)."""
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
