"""Who may do what in Airflow (issue 27): the Analyst, Operator and Admin roles of the FAB auth
manager, the ``access_control`` every outreach DAG declares, and :func:`sync`, which creates the
roles and the first admin user when a deployment starts (``outreach roles sync``).

Analyst: FAB's Viewer and the plugins list; Operator: plus runs, task instances and Required
Actions, usable only on the DAGs that grant it edit (:data:`OPERATOR_ACCESS`); Admin: FAB's own,
alone on the admin-only DAGs. Why it holds in FAB: docs/howto/users-and-roles.md."""

from __future__ import annotations

from typing import Any

AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
"""``[core] auth_manager`` of every outreach deployment (:func:`outreach.dev.deploy.shared_settings`)."""

ANALYST = "Analyst"
OPERATOR = "Operator"
ADMIN = "Admin"
ADMIN_USER = "admin"
"""The user :func:`sync` creates (role :data:`ADMIN`) when it does not exist yet."""
ADMIN_PASSWORD_VAR = "OUTREACH_ADMIN_PASSWORD"
"""The environment variable holding that user's first password (docker-compose: from ``.env``;
``make airflow``: generated once into ``.airflow-deploy/admin_password`` when unset)."""

OPERATOR_ACCESS: dict[str, dict[str, set[str]]] = {
    "DAGs": {"can_read", "can_edit"},
    "DAG Runs": {"can_read", "can_create"},
}
"""The ``access_control`` entry of an operator DAG for :data:`OPERATOR` (resource names and
actions of ``airflow.providers.fab.www.security.permissions``): read it, edit it (pause, resume,
clear, answer), trigger it."""
ADMIN_ACCESS: dict[str, dict[str, set[str]]] = {
    "DAGs": {"can_read", "can_edit", "can_delete"},
    "DAG Runs": {"can_read", "can_create", "can_delete"},
}

LEVELS = ("operator", "admin")


def access_control(level: str = "operator") -> dict[str, dict[str, set[str]]]:
    """Return the ``access_control`` of a DAG (through :func:`outreach.airflow.defaults.dag_kwargs`).

    :param level: ``operator`` (operators and admins may run it) or ``admin`` (admins only:
        suppress, unsuppress, lead erase, campaign approval); analysts read every DAG either way.
    :raises ValueError: another level."""
    if level == "operator":
        return {OPERATOR: {k: set(v) for k, v in OPERATOR_ACCESS.items()},
                ADMIN: {k: set(v) for k, v in ADMIN_ACCESS.items()}}
    if level == "admin":
        return {ADMIN: {k: set(v) for k, v in ADMIN_ACCESS.items()}}
    raise ValueError(f"access level must be one of {LEVELS}, got {level!r}")


def role_permissions() -> dict[str, set[tuple[str, str]]]:
    """Return the global ``(action, resource)`` permissions of :data:`ANALYST` and
    :data:`OPERATOR` (DAG-level ones come from the DAGs' ``access_control``)."""
    from airflow.providers.fab.auth_manager.security_manager.override import (
        FabAirflowSecurityManagerOverride as Sm,
    )
    from airflow.providers.fab.www.security import permissions as p

    analyst = {*Sm.VIEWER_PERMISSIONS, (p.ACTION_CAN_READ, p.RESOURCE_PLUGIN)}
    operator = analyst | {
        (p.ACTION_CAN_CREATE, p.RESOURCE_DAG_RUN), (p.ACTION_CAN_EDIT, p.RESOURCE_DAG_RUN),
        (p.ACTION_CAN_CREATE, p.RESOURCE_TASK_INSTANCE), (p.ACTION_CAN_EDIT, p.RESOURCE_TASK_INSTANCE),
        (p.ACTION_CAN_EDIT, p.RESOURCE_HITL_DETAIL), (p.ACTION_CAN_ACCESS_MENU, p.RESOURCE_HITL_DETAIL),
    }
    return {ANALYST: analyst, OPERATOR: operator}


def _is_dag_level(resource: str) -> bool:
    from airflow.providers.fab.www.security import permissions as p

    return resource.startswith(tuple(f"{r}:" for r in p.RESOURCE_DETAILS_MAP))


def sync(admin_password: str | None = None) -> list[str]:
    """Create or reset :data:`ANALYST` and :data:`OPERATOR` to exactly :func:`role_permissions`, make
    sure FAB's roles exist, and create :data:`ADMIN_USER` with ``admin_password`` if missing (an
    existing user is never touched). Idempotent; needs the metadata migrated and FAB configured.

    :returns: what it did, one line each.
    :raises RuntimeError: the admin user is missing and no password was given."""
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

    done: list[str] = []
    with get_application_builder() as appbuilder:
        sm: Any = appbuilder.sm
        sm.bulk_sync_roles(sm.ROLE_CONFIGS)  # Admin, Viewer…: what FAB itself syncs at start
        wanted = role_permissions()
        sm.bulk_sync_roles([{"role": name, "perms": sorted(perms)} for name, perms in wanted.items()])
        for name, perms in wanted.items():
            role = sm.find_role(name)
            stale = [perm for perm in role.permissions
                     if (perm.action.name, perm.resource.name) not in perms
                     and not _is_dag_level(perm.resource.name)]
            for perm in stale:
                sm.remove_permission_from_role(role, perm)
            done.append(f"role {name}: {len(perms)} permissions"
                        + (f" ({len(stale)} removed)" if stale else ""))
        if sm.find_user(username=ADMIN_USER) is None:
            if not admin_password:
                raise RuntimeError(f"no user {ADMIN_USER!r} yet and {ADMIN_PASSWORD_VAR} is not set: "
                                   "set it to the first admin's password")
            user = sm.add_user(ADMIN_USER, "outreach", "admin", "admin@localhost.invalid",
                               sm.find_role(ADMIN), admin_password)
            if not user:
                raise RuntimeError(f"FAB could not create the user {ADMIN_USER!r}")
            done.append(f"user {ADMIN_USER} created (role {ADMIN})")
    return done
