"""`amodal serve`: the HTTP API over a `Runtime` (`create_app`), and the process that serves it
(`runtime.server.serve`)."""

from __future__ import annotations

from runtime.server.app import create_app
from runtime.server.auth import Authenticator, check_binding

__all__ = ["Authenticator", "check_binding", "create_app"]
