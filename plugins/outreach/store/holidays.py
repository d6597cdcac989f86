"""Typed calls of ``sql/queries/holidays.sql``, one function per query, named like it.

``outreach.holidays`` holds the public holidays per country (outreach.calendars fills it; the
queue and the claim read it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from outreach.store._run import Conn, execute, many


@dataclass(frozen=True)
class CountryYear:
    """A row of ``holiday_years_missing``: an ISO country code and a year not filled yet."""

    country: str
    year: int


def holiday_years_missing(conn: Conn, *, first_year: int, last_year: int) -> list[CountryYear]:
    """``holiday_years_missing``: the lead and campaign countries whose holidays of
    ``first_year`` … ``last_year`` are not in ``outreach.holidays`` yet."""
    return many(conn, "holiday_years_missing",
                {"first_year": first_year, "last_year": last_year}, CountryYear)


def holiday_year_add(conn: Conn, *, country: str, year: int, known: bool,
                     days: list[dt.date], names: list[str]) -> None:
    """``holiday_year_add``: store ``country``'s holidays of ``year`` (``days[i]`` named
    ``names[i]``) and mark the year filled; a year already filled is left alone."""
    execute(conn, "holiday_year_add",
            {"country": country, "year": year, "known": known, "days": days, "names": names})
