r"""A signup endpoint that sends one welcome email, whatever retries: the outbox pattern with
outreach's durable delivery key.

    OUTREACH_DATABASE_URL=postgresql://… uvicorn --app-dir examples/signup_app app:app

``POST /signup`` with a JSON body ``{"email": …, "name": …}`` and an ``Idempotency-Key`` header
that the client makes once per signup and sends again with every retry (RFC draft
"The Idempotency-Key HTTP Header Field"). In **one** database transaction the endpoint

1. finds the signup of that key (a retry: answer what the first request answered), or
2. inserts the user with a fresh verification token, enqueues the welcome email with the
   delivery key ``welcome:<Idempotency-Key>`` (``outreach.transactional.enqueue``), and stores
   the email's id on the user row,

and commits. The user row and the email row commit together or not at all; outreach sends the
email once (``outreach transactional worker``, or the ``outreach_transactional`` DAG).

What an address is, is outreach's one normaliser (``outreach.addresses.normalize_address``:
trimmed of white space, tabs included, Unicode NFC, lower case): ``a@x.example``,
`` a@x.example `` and ``a@x.example\t`` are one user. The users table stores that form and is
UNIQUE on ``outreach.normalize_address(email)``, the same rule in SQL, whoever writes to it.

Replies: 201 (created), 200 (a replay of the same key), 409 (the address signed up with another
key), 422 (bad input, or the key reused for another address), 400 (no Idempotency-Key).

``SIGNUP_EXAMPLE_AFTER_COMMIT``, for tests: ``sleep:<seconds>`` delays the reply after the
commit (a client times out and retries); ``kill`` SIGKILLs the process right after the first
commit (the process dies between the commit and the reply).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from typing import Any

import psycopg
from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from outreach import db
from outreach.addresses import EmailNotValidError, normalize_address
from outreach.transactional import TransactionalError, enqueue

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS signup_example;
CREATE TABLE IF NOT EXISTS signup_example.users (
    id                 bigserial PRIMARY KEY,
    email              text NOT NULL,
    name               text NOT NULL,
    signup_key         text NOT NULL,
    verification_token text NOT NULL,
    welcome_email_id   bigint REFERENCES outreach.emails (id),
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT signup_example_users_email_key UNIQUE (email),
    CONSTRAINT signup_example_users_signup_key_key UNIQUE (signup_key)
);
-- One user per address as outreach normalises it (migration 0008), not per spelling.
CREATE UNIQUE INDEX IF NOT EXISTS signup_example_users_normalized_email_key
    ON signup_example.users (outreach.normalize_address(email));
"""


class Signup(BaseModel):
    """The request body: the new user's ``email`` and ``name``."""

    email: str = Field(min_length=3, max_length=254)
    name: str = Field(min_length=1, max_length=100)


def database_url() -> str:
    """``OUTREACH_DATABASE_URL``, else — with ``OUTREACH_EMBEDDED_DB=1`` — outreach's embedded
    server (see :func:`outreach.dev.embedded.database_url`; it raises when neither is set)."""
    from outreach.dev.embedded import database_url as embedded_url

    return embedded_url()


def create_schema(url: str) -> None:
    """Create the example's table (idempotent)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)


def _address(body: Signup) -> str:
    """The signup's address in outreach's normal form; 422 when it is not an address."""
    try:
        return normalize_address(body.email)
    except EmailNotValidError as exc:
        raise HTTPException(422, f"email: {exc}") from None


def _replay(conn, key: str, address: str) -> tuple[int, dict[str, Any]] | None:
    """The answer to a request whose key already signed up: 200 with that signup, or 422 when
    the key comes with another address (a key names one request)."""
    row = conn.execute("SELECT id, email, welcome_email_id FROM signup_example.users "
                       "WHERE signup_key = %s", (key,)).fetchone()
    if row is None:
        return None
    if row["email"] != address:
        raise HTTPException(422, "this Idempotency-Key was used for another signup")
    return 200, {"user_id": row["id"], "email_id": row["welcome_email_id"], "replayed": True}


def signup_once(url: str, key: str, body: Signup, verify_base: str) -> tuple[int, dict[str, Any]]:
    """Run one signup in one transaction; return ``(HTTP status, body)``.

    :raises TransactionalError: the welcome email cannot be enqueued (the whole signup rolls
        back: no user row without its email row).
    """
    address = _address(body)
    with db.connect(url) as conn:
        try:
            with conn.transaction():
                if (done := _replay(conn, key, address)) is not None:
                    return done
                token = secrets.token_urlsafe(24)
                user_id = conn.execute(
                    "INSERT INTO signup_example.users (email, name, signup_key, verification_token)"
                    " VALUES (%s, %s, %s, %s) RETURNING id",
                    (address, body.name, key, token)).fetchone()["id"]
                email = enqueue(conn, f"welcome:{key}", address, "welcome",
                                {"user": {"name": body.name}, "verify_url": f"{verify_base}?token={token}"})
                conn.execute("UPDATE signup_example.users SET welcome_email_id = %s WHERE id = %s",
                             (email.email_id, user_id))
        except psycopg.errors.UniqueViolation:
            # A concurrent request committed first. Whichever unique index reported it (the key
            # or the address), a request with the same key is a replay; only an address that
            # signed up under another key is a conflict.
            with conn.transaction():
                if (done := _replay(conn, key, address)) is not None:
                    return done
            raise HTTPException(409, "this address has already signed up") from None
    return 201, {"user_id": user_id, "email_id": email.email_id, "replayed": False}


def _after_commit() -> None:
    spec = os.environ.get("SIGNUP_EXAMPLE_AFTER_COMMIT", "")
    if spec.startswith("sleep:"):
        time.sleep(float(spec.split(":", 1)[1]))
    elif spec == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def create_app(url: str | None = None, verify_base: str = "https://app.example/verify") -> FastAPI:
    """Return the FastAPI application (the table is created at start-up)."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.url = url or database_url()
        create_schema(app.state.url)
        yield

    app = FastAPI(title="signup example", lifespan=lifespan)

    @app.post("/signup")
    def signup(body: Signup, idempotency_key: str | None = Header(default=None)) -> JSONResponse:
        if not idempotency_key or len(idempotency_key) > 150:
            raise HTTPException(400, "send an Idempotency-Key header (one per signup, reused on retries)")
        try:
            status, out = signup_once(app.state.url, idempotency_key, body, verify_base)
        except TransactionalError as exc:
            raise HTTPException(422, str(exc)) from None
        if status == 201:
            _after_commit()
        return JSONResponse(out, status_code=status)

    return app


app = create_app()
