-- Public holidays per country (outreach.holidays, migration 0137): the calendar of the queue and
-- the claim. Filled by outreach.calendars.fill, before every queueing.

-- name: holiday_years_missing
-- The (country, year) pairs the queue and the claim may need and outreach.holiday_years does not
-- have yet: every country of a lead (custom column `country`, an ISO code) or of a campaign
-- (`country:`), for the years %(first_year)s to %(last_year)s.
WITH countries AS (
    SELECT DISTINCT upper(btrim(l.custom ->> 'country')) AS country
    FROM outreach.leads l
    WHERE l.custom ? 'country'
    UNION
    SELECT c.country FROM outreach.campaigns c WHERE c.country IS NOT NULL
)
SELECT c.country, y.year::integer AS year
FROM countries c
CROSS JOIN generate_series(%(first_year)s::integer, %(last_year)s::integer) AS y(year)
WHERE c.country ~ '^[A-Z]{2}$'
  AND NOT EXISTS (SELECT 1 FROM outreach.holiday_years hy
                  WHERE hy.country = c.country AND hy.year = y.year)
ORDER BY c.country, y.year;

-- name: holiday_year_add
-- One country's holidays of one year (%(days)s, %(names)s: parallel arrays) and the mark that the
-- year is filled (%(known)s false: the holidays package does not know the country). A concurrent
-- run that filled it first wins: nothing twice.
WITH mark AS (
    INSERT INTO outreach.holiday_years (country, year, known)
    VALUES (%(country)s, %(year)s, %(known)s)
    ON CONFLICT (country, year) DO NOTHING
    RETURNING country
)
INSERT INTO outreach.holidays (country, day, name)
SELECT m.country, d.day, d.name
FROM mark m
CROSS JOIN unnest(%(days)s::date[], %(names)s::text[]) AS d(day, name)
ON CONFLICT (country, day) DO NOTHING;
