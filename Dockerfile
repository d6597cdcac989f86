# The image every Airflow service of docker-compose.yaml runs: the official Airflow image with
# outreach's runtime requirements and the package. `docker compose build` builds it.
#
# The base image's Airflow and providers were installed with Airflow's constraints file
# (constraints-3.3.2/constraints-3.11.txt). As that file says, it is for the Airflow install
# step only: the step after it names apache-airflow==<version> among its targets so pip never
# moves Airflow, and `pip check` fails the build on any broken requirement.
FROM apache/airflow:3.3.2-python3.11
ARG AIRFLOW_VERSION=3.3.2

# Runtime pins only (deploy/requirements-image.txt: requirements.txt's pins without the test
# and lint tools), so the image carries no pytest, mypy, ruff or selenium.
COPY --chown=airflow:0 deploy/requirements-image.txt /opt/outreach/requirements-image.txt
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
        -r /opt/outreach/requirements-image.txt \
    && pip check

# DAGs, the package, SQL, templates and the shipped include/ files (see .dockerignore).
COPY --chown=airflow:0 . /opt/outreach
RUN pip install --no-cache-dir --no-deps /opt/outreach && pip check

ENV OUTREACH_HOME=/opt/outreach \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/outreach/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/outreach/plugins
