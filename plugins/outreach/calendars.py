"""Public holidays for the queue's and the claim's calendar, decided in SQL from ``outreach.holidays``.

:func:`fill` stores them ahead, before every queueing, for every lead and campaign country (ISO
3166-1 alpha-2), this year and the next, from the ``holidays`` package (national only). Why:
docs/explanation/contact-policy.md#calendars."""

from __future__ import annotations

import datetime as dt
import logging

from outreach import db
from outreach.store import holidays as store

log = logging.getLogger(__name__)

YEARS_AHEAD = 1
"""Years after the current one that are filled too."""


def country_holidays(country: str, year: int) -> dict[dt.date, str] | None:
    """Return the national public holidays of ``country`` in ``year`` (date → name), or ``None``
    when the ``holidays`` package does not know the country.

    :param country: an ISO 3166-1 alpha-2 code, upper case (``DE``).
    :param year: the calendar year.
    """
    import holidays

    try:
        days = holidays.country_holidays(country, years=year)
    except NotImplementedError:
        return None
    return {day: str(name) for day, name in sorted(days.items())}


def fill(url: str, *, now: dt.datetime | None = None) -> int:
    """Store the holidays of every lead and campaign country not filled yet for this year and the next;
    return how many (country, year) pairs were filled.

    Safe concurrently and twice (ON CONFLICT DO NOTHING, a transaction per pair); a country the
    package does not know is marked filled with no holiday.

    :param now: the clock deciding the current year (UTC; default the system clock).
    :raises psycopg.Error: the database failed (the pairs filled before stay)."""
    year = (now or dt.datetime.now(dt.UTC)).year
    with db.transaction(url) as conn:
        missing = store.holiday_years_missing(conn, first_year=year,
                                              last_year=year + YEARS_AHEAD)
    for pair in missing:
        days = country_holidays(pair.country, pair.year)
        if days is None:
            log.warning("holidays: country %s is not known to the holidays package; its leads "
                        "get no holidays", pair.country)
        with db.transaction(url) as conn:
            store.holiday_year_add(conn, country=pair.country, year=pair.year,
                                   known=days is not None, days=list(days or {}),
                                   names=list((days or {}).values()))
    if missing:
        log.info("holidays: filled=%s (country, year) pairs", len(missing))
    return len(missing)
