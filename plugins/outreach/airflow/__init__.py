"""The Airflow wing: the only part of the package that imports Airflow.

DAG files (``dags/``) call these modules and nothing else; the domain modules of
:mod:`outreach` never import from here. ``import airflow`` inside this package is absolute, so it
always means Airflow itself (``plugins/`` is on ``sys.path``, never ``plugins/outreach/``), and
``plugins/.airflowignore`` keeps Airflow's plugin loader out of ``plugins/outreach/``.
"""
