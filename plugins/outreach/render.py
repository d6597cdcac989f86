"""Rendering: template + lead → subject, text part, HTML part. A pure function of its inputs.

Templates are Jinja2 files ``include/templates/<name>.txt.j2`` and ``<name>.html.j2`` rendered
with ``StrictUndefined`` (a missing variable is an error, never an empty string) and HTML
autoescaping. Both parts must show the unsubscribe link (Gmail and Yahoo sender guidelines: a
visible unsubscribe link besides the one-click header).
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from outreach.paths import templates_dir


class RenderError(ValueError):
    """A template could not be rendered for this lead; the message says which and why."""


@dataclass(frozen=True)
class Rendered:
    """A rendered email: one-line ``subject``, ``text`` and ``html`` bodies."""

    subject: str
    text: str
    html: str


@functools.cache
def _environment(directory: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "html"),
                                            default_for_string=False),  # subjects are text
        keep_trailing_newline=True,
    )


@functools.lru_cache(maxsize=256)
def _subject_template(directory: Path, subject: str) -> jinja2.Template:
    # Compiled once per (folder, subject), as the environment caches file templates: a batch
    # renders the same step subject for every row.
    return _environment(directory).from_string(subject)


def render(template: str, subject: str | None, context: dict[str, Any],
           directory: Path | None = None, *, require_unsubscribe: bool = True) -> Rendered:
    """Render one email.

    :param template: template name (``intro`` → ``intro.txt.j2`` + ``intro.html.j2``).
    :param subject: the step's subject, a Jinja2 string; ``None``: the template's own
        ``<name>.subject.j2`` (transactional templates). Whitespace (CR/LF too) is folded to one
        space so it can never break the header.
    :param context: for marketing, ``lead`` (first_name, last_name, company, title, email),
        ``sender`` (name, address), ``campaign`` (key, name) and ``unsubscribe_url``; for
        transactional mail, what the application enqueued plus ``recipient`` and ``sender``.
    :param require_unsubscribe: both parts must show ``context["unsubscribe_url"]`` (marketing:
        Gmail and Yahoo sender guidelines); ``False`` for transactional mail.
    :raises RenderError: missing template or variable, a template error, or a part without the
        unsubscribe link.
    """
    directory = directory or templates_dir()
    env = _environment(directory)
    try:
        raw_subject = (_subject_template(directory, subject).render(context) if subject is not None
                       else env.get_template(f"{template}.subject.j2").render(context))
        subject_out = " ".join(raw_subject.split())
        text = env.get_template(f"{template}.txt.j2").render(context)
        html_out = env.get_template(f"{template}.html.j2").render(context)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"template file not found: {exc.name}") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {template!r}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {template!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a filter or expression failing for this lead's data
        raise RenderError(f"template {template!r}: {type(exc).__name__}: {exc}") from None
    if not subject_out:
        raise RenderError(f"template {template!r}: the subject renders empty")
    if not require_unsubscribe:
        return Rendered(subject_out, text, html_out)
    url = context["unsubscribe_url"]
    if url not in text:
        raise RenderError(f"template {template!r}: the text part must show {{{{ unsubscribe_url }}}}")
    if url not in html_out and html.escape(url) not in html_out:
        raise RenderError(f"template {template!r}: the HTML part must show {{{{ unsubscribe_url }}}}")
    return Rendered(subject_out, text, html_out)
