# The image every Airflow service of docker-compose.yaml runs: the official Airflow image with
# outreach's pinned requirements and the package. `docker compose build` builds it.
FROM apache/airflow:3.3.2-python3.11

# The pins of requirements.txt, apache-airflow==3.3.2 among them, so pip keeps the image's Airflow.
COPY --chown=airflow:0 requirements.txt /opt/outreach/requirements.txt
RUN pip install --no-cache-dir -r /opt/outreach/requirements.txt

# DAGs, the package, SQL, templates and the shipped include/ files (see .dockerignore).
COPY --chown=airflow:0 . /opt/outreach
RUN pip install --no-cache-dir --no-deps /opt/outreach

ENV OUTREACH_HOME=/opt/outreach \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/outreach/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/outreach/plugins
