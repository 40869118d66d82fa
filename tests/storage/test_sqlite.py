"""What only the SQLite backend promises: where its file lives, how it is set up, its migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from runtime.storage import (
    DATABASE_FILE,
    StorageError,
    UnsupportedDatabaseError,
    default_database_path,
    open_storage,
    sqlite_path,
)
from runtime.storage import sqlite as sqlite_backend
from runtime.storage.migrations import SQLITE_MIGRATIONS, Migration
from runtime.storage.sqlite import WAL_CHECKPOINT_PAGES, SqliteStorage

from ._helpers import session_record

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pragma(path: Path, name: str) -> object:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        connection.close()


def applied(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("SELECT name FROM migrations ORDER BY rowid")]
    finally:
        connection.close()


async def test_the_database_runs_in_wal_mode_with_foreign_keys_enforced(tmp_path):
    path = tmp_path / "amodal.db"
    storage = await open_storage(path)
    try:
        assert pragma(path, "journal_mode") == "wal"
        connection = storage._connection  # type: ignore[attr-defined]
        assert connection.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        checkpoint = connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        assert checkpoint == WAL_CHECKPOINT_PAGES > 1000  # rarer than SQLite's default
    finally:
        await storage.close()


async def _while_another_process_writes(path: Path, seconds: float, ticks: list[float]) -> None:
    """Holds the database's write lock for `seconds` (as another process would), and counts
    the event loop's turns meanwhile."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            ticks.append(time.monotonic())
            await anyio.sleep(0.01)
        other.execute("COMMIT")
    finally:
        other.close()


async def test_a_write_waits_for_another_writer_without_blocking_the_loop(tmp_path):
    path = tmp_path / "amodal.db"
    storage = await open_storage(path)
    ticks: list[float] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_while_another_process_writes, path, 0.3, ticks)
            await anyio.sleep(0.05)
            started = time.monotonic()
            await storage.create_session(session_record())
            waited = time.monotonic() - started

        assert waited >= 0.2  # it waited for the lock rather than failing
        assert len([t for t in ticks if t > started]) >= 10  # and the loop went on meanwhile
        assert await storage.get_session("s1") is not None
    finally:
        await storage.close()


async def test_a_lock_held_past_the_busy_timeout_is_a_storage_error_and_nothing_is_lost(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_SECONDS", 0.2)
    path = tmp_path / "amodal.db"
    storage = await open_storage(path)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_while_another_process_writes, path, 1.0, [])
            await anyio.sleep(0.05)
            with pytest.raises(StorageError, match=r"still locked by another process after 0\.2 s"):
                await storage.create_session(session_record())
        assert await storage.get_session("s1") is None
        await storage.create_session(session_record())  # the lock is free: it works again
        assert await storage.get_session("s1") is not None
    finally:
        await storage.close()


async def test_missing_directories_of_the_database_file_are_created(tmp_path):
    path = tmp_path / "a" / "b" / "amodal.db"

    storage = await open_storage(path)
    await storage.close()

    assert path.is_file()


async def test_a_sqlite_url_opens_the_same_file_as_its_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = await open_storage("sqlite:///data/amodal.db")
    await first.create_session(session_record())
    await first.close()

    by_absolute_url = await open_storage(f"sqlite:///{tmp_path / 'data' / 'amodal.db'}")
    try:
        assert await by_absolute_url.get_session("s1") is not None
    finally:
        await by_absolute_url.close()


def test_sqlite_urls_follow_the_three_and_four_slash_convention():
    assert sqlite_path("sqlite:///relative/x.db") == Path("relative/x.db")
    assert sqlite_path("sqlite:////srv/amodal/x.db") == Path("/srv/amodal/x.db")
    assert sqlite_path("/srv/amodal/x.db") == Path("/srv/amodal/x.db")


async def test_an_unknown_url_scheme_is_refused_naming_the_scheme():
    with pytest.raises(UnsupportedDatabaseError, match="'mysql'"):
        await open_storage("mysql://localhost/amodal")


async def test_a_database_that_cannot_be_opened_raises_storage_error_naming_it(tmp_path):
    directory = tmp_path / "is-a-directory.db"
    directory.mkdir()

    with pytest.raises(StorageError, match="is-a-directory"):
        await open_storage(directory)


def test_the_default_database_lives_under_dot_amodal_in_the_repo(tmp_path):
    path = default_database_path(tmp_path, {})

    assert path == tmp_path / ".amodal" / DATABASE_FILE
    assert path.parent.is_dir()


def test_amodal_data_dir_moves_the_default_database(tmp_path):
    data_dir = tmp_path / "elsewhere" / "data"

    path = default_database_path(tmp_path / "repo", {"AMODAL_DATA_DIR": str(data_dir)})

    assert path == data_dir / DATABASE_FILE
    assert data_dir.is_dir()
    assert not (tmp_path / "repo" / ".amodal").exists()


def test_an_empty_amodal_data_dir_means_the_repo_default(tmp_path):
    assert default_database_path(tmp_path, {"AMODAL_DATA_DIR": ""}) == (
        tmp_path / ".amodal" / DATABASE_FILE
    )


async def test_a_migration_appended_later_is_applied_once_on_the_next_open(tmp_path):
    path = tmp_path / "amodal.db"
    storage = await SqliteStorage.open(path)
    await storage.create_session(session_record())
    await storage.close()
    extended = (
        *SQLITE_MIGRATIONS,
        Migration("m999_session_titles", "ALTER TABLE sessions ADD COLUMN title TEXT;"),
    )

    storage = await SqliteStorage.open(path, migrations=extended)
    try:
        assert await storage.migrate() == []
        assert await storage.get_session("s1") is not None
    finally:
        await storage.close()

    assert applied(path) == [migration.name for migration in extended]


async def test_a_failing_migration_applies_nothing_and_records_nothing(tmp_path):
    path = tmp_path / "amodal.db"
    broken = (
        *SQLITE_MIGRATIONS,
        Migration("m998_fine", "CREATE TABLE fine (x INTEGER);"),
        Migration("m999_broken", "ALTER TABLE no_such_table ADD COLUMN y TEXT;"),
    )
    await (await SqliteStorage.open(path)).close()

    with pytest.raises(StorageError, match="no_such_table"):
        await SqliteStorage.open(path, migrations=broken)

    assert applied(path) == [migration.name for migration in SQLITE_MIGRATIONS]
    connection = sqlite3.connect(path)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    finally:
        connection.close()
    assert "fine" not in tables


async def test_a_migration_with_several_statements_runs_them_all(tmp_path):
    path = tmp_path / "amodal.db"
    extra = Migration(
        "m999_two",
        """
        -- a comment; with a semicolon
        CREATE TABLE one (x TEXT DEFAULT 'a;b');
        CREATE TABLE two (y INTEGER);
        """,
    )

    await (await SqliteStorage.open(path, migrations=(*SQLITE_MIGRATIONS, extra))).close()

    connection = sqlite3.connect(path)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    finally:
        connection.close()
    assert {"one", "two"} <= tables


def _index_is_sound(path: Path) -> None:
    """FTS5's own check that its index matches the texts it indexes (raises if not)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("INSERT INTO event_search (event_search) VALUES ('integrity-check')")
    finally:
        connection.close()


async def test_texts_indexed_before_m015_stay_found_and_leave_the_index_when_deleted(tmp_path):
    from runtime.storage import NewEvent

    def said(text: str) -> NewEvent:
        return NewEvent("user", {"text": text}, "r", "helper", "v1", search_text=text)

    path = tmp_path / "old.db"
    before = [m for m in SQLITE_MIGRATIONS if m.name < "m015"]
    assert SQLITE_MIGRATIONS[len(before)].name == "m015_search_index_on_read"
    old = await SqliteStorage.open(path, migrations=tuple(before))
    for name in ("a1", "a2"):
        await old.create_session(session_record(name, scope_id="acme", owner="alice"))
    await old.append_events("a1", [said("the old lighthouse")])  # indexed by the old trigger
    await old.close()

    new = await open_storage(path)
    try:
        await new.append_events("a2", [said("a new lighthouse")])  # indexed when searched
        found = await new.search_sessions("acme", "alice", "lighthouse")
        assert {m.session_id for m in found} == {"a1", "a2"}
        assert await new.delete_session("a1")
        await new.append_events("a2", [said("lighthouse again")])
        assert await new.delete_session("a2")  # one text indexed, one not yet
        assert await new.search_sessions("acme", "alice", "lighthouse") == []
    finally:
        await new.close()
    _index_is_sound(path)
