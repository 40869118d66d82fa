"""PostgreSQL for tests: a fresh schema per test on the database of AMODAL_TEST_DATABASE_URL.

The database runs on the development machines and in CI, so a test that needs it
fails (never skips) when it is unreachable. Loaded as a pytest plugin by
tests/conftest.py, so any test may ask for these fixtures:

- `postgres_url`: a URL whose tables live in a new, empty schema (dropped after);
- `database_url`: parametrized over "sqlite" (None: the default SQLite file)
  and "postgres" (a `postgres_url`), for tests that must pass on both backends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest

TEST_DATABASE_ENV = "AMODAL_TEST_DATABASE_URL"
DEFAULT_TEST_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"


def database_dsn() -> str:
    return os.environ.get(TEST_DATABASE_ENV) or DEFAULT_TEST_DATABASE_URL


def connect() -> psycopg.Connection[tuple[object, ...]]:
    url = database_dsn()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        pytest.fail(
            f"PostgreSQL is unreachable at {url} ({error}); start it "
            f"(pg_ctlcluster <version> main start) or point {TEST_DATABASE_ENV} at one",
            pytrace=False,
        )


class Schema:
    """A new schema in the test database; `url` puts every table of a storage in it."""

    def __init__(self) -> None:
        self.name = f"amodal_test_{uuid.uuid4().hex[:12]}"
        with connect() as connection:
            connection.execute(f'CREATE SCHEMA "{self.name}"')
        base = database_dsn()
        separator = "&" if "?" in base else "?"
        # Commits without waiting for the disk: a test database loses nothing it needs.
        options = f"-csearch_path={self.name} -csynchronous_commit=off"
        self.url = f"{base}{separator}options={quote(options)}"

    def drop(self) -> None:
        with connect() as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


@pytest.fixture
def postgres_schema() -> Iterator[Schema]:
    schema = Schema()
    try:
        yield schema
    finally:
        schema.drop()


@pytest.fixture
def postgres_url(postgres_schema: Schema) -> str:
    return postgres_schema.url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for SQLite (the default file under AMODAL_DATA_DIR), else a fresh PostgreSQL URL."""
    if request.param == "sqlite":
        yield None
        return
    schema = Schema()
    try:
        yield schema.url
    finally:
        schema.drop()
