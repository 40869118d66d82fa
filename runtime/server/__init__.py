"""`amodal serve`: the HTTP API over one agent repo, its database and its model."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from runtime.chat import ChatRuntime, ModelRouter
from runtime.exceptions import AmodalError
from runtime.models import ModelEndpoint
from runtime.reload import LiveBundle
from runtime.server.app import create_app
from runtime.server.auth import Authenticator
from runtime.storage import default_database_path, open_storage


@dataclass
class Server:
    """Everything a running server owns, for its lifespan."""

    live: LiveBundle
    runtime: ChatRuntime
    auth: Authenticator
    app: FastAPI


def database_url(repo: Path, environ: Mapping[str, str]) -> str:
    return environ.get("DATABASE_URL") or str(default_database_path(repo, environ))


def check_binding(host: str, auth: Authenticator) -> None:
    """Refuse to listen beyond loopback when no credential is required."""
    if auth.configured:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise AmodalError(
            f"refusing to listen on {host} without authentication: every caller would be the "
            "operator. Set AMODAL_OPERATOR_TOKEN or `auth` in amodal.json, or bind to 127.0.0.1."
        )


async def open_server(
    live: LiveBundle,
    *,
    environ: Mapping[str, str] | None = None,
    fallback_model: ModelEndpoint | None = None,
) -> Server:
    """Open the database and build the app over `live` (close it with close_server())."""
    env = os.environ if environ is None else environ
    storage = await open_storage(database_url(live.root, env))
    runtime = ChatRuntime(live, storage, ModelRouter(env, fallback_model))
    auth = Authenticator(live().config.auth, env)
    return Server(live, runtime, auth, create_app(live, runtime, auth))


async def close_server(server: Server) -> None:
    await server.runtime.models.aclose()
    await server.runtime.storage.close()


@asynccontextmanager
async def running(server: Server) -> AsyncIterator[Server]:
    try:
        yield server
    finally:
        await close_server(server)


__all__ = ["Server", "check_binding", "close_server", "create_app", "open_server", "running"]
