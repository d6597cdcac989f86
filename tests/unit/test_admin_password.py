"""The first password of the Airflow user admin (``Deployment.admin_password``, issue 27): the
one given wins; without one, ``make airflow`` generates it once into the deployment's home,
readable by its owner only, and keeps it across starts."""

from __future__ import annotations

import stat

from outreach.airflow.roles import ADMIN_PASSWORD_VAR
from outreach.dev.deploy import Deployment


def deployment(home, **env: str) -> Deployment:
    return Deployment(home=home, metadata_url="postgresql:///unused", outreach_url="postgresql:///unused",
                      env_extra=env)


def test_a_given_password_wins_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(ADMIN_PASSWORD_VAR, raising=False)
    assert deployment(tmp_path, **{ADMIN_PASSWORD_VAR: "given-pw"}).admin_password() == "given-pw"
    assert not (tmp_path / "admin_password").exists()


def test_without_one_it_is_generated_once_owner_only_and_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(ADMIN_PASSWORD_VAR, raising=False)
    first = deployment(tmp_path).admin_password()
    path = tmp_path / "admin_password"
    assert len(first) >= 20 and path.read_text() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert deployment(tmp_path).admin_password() == first  # the next start: the same password
