#!/bin/bash
# Run once by the postgres image on an empty data directory (/docker-entrypoint-initdb.d): the
# outreach database and its role, next to Airflow's metadata database (POSTGRES_DB).
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v pw="$OUTREACH_DB_PASSWORD" <<'SQL'
CREATE ROLE outreach LOGIN PASSWORD :'pw';
CREATE DATABASE outreach OWNER outreach;
SQL
