"""The web console (SPEC 17): `amodal serve`'s pages for people, at `/`.

The server renders each page's frame (navigation, headings, forms and their
labels) from the Jinja2 templates beside this module; the page's JavaScript
module (in `static/`, plain ES modules, no build step) fills it with data from
the HTTP API, sending the visitor's own credential. So a page can show nothing
that credential could not read through the API, and every value drawn from data
goes into the page as text, never as HTML. A strict Content-Security-Policy
allows scripts, styles, images and connections from this server only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Header
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from runtime.exceptions import AuthError
from runtime.server.auth import Authenticator

HERE = Path(__file__).parent
STATIC = HERE / "static"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def add_console(app: FastAPI, auth: Authenticator) -> None:
    """Serve the console's pages, scripts and styles on `app` (none of it in the OpenAPI)."""

    def page(template: str, **values: Any) -> HTMLResponse:
        # `section`: the navigation link of the page (an agent is under Agents, ...).
        section = {"agent": "agents", "session": "sessions"}.get(template, template)
        html = _templates.get_template(f"{template}.html").render(
            page=template, section=section, **values
        )
        return HTMLResponse(html, headers=PAGE_HEADERS)

    @app.get("/", include_in_schema=False)
    async def agents() -> HTMLResponse:
        return page("agents", title="Agents")

    @app.get("/console/agents/{name}", include_in_schema=False)
    async def agent(name: str) -> HTMLResponse:
        return page("agent", title=name, name=name)

    @app.get("/console/chat", include_in_schema=False)
    async def chat() -> HTMLResponse:
        return page("chat", title="Chat")

    @app.get("/console/sessions", include_in_schema=False)
    async def sessions() -> HTMLResponse:
        return page("sessions", title="Sessions")

    @app.get("/console/sessions/{session_id}", include_in_schema=False)
    async def session(session_id: str) -> HTMLResponse:
        return page("session", title=f"Session {session_id[:8]}", session_id=session_id)

    @app.get("/console/memory", include_in_schema=False)
    async def memory() -> HTMLResponse:
        return page("memory", title="Memory")

    @app.get("/console/stores", include_in_schema=False)
    async def stores() -> HTMLResponse:
        return page("stores", title="Stores")

    @app.get("/console/automations", include_in_schema=False)
    async def automations() -> HTMLResponse:
        return page("automations", title="Automations")

    @app.get("/console/usage", include_in_schema=False)
    async def usage() -> HTMLResponse:
        return page("usage", title="Usage")

    @app.get("/console/health", include_in_schema=False)
    async def health() -> HTMLResponse:
        return page("health", title="Health")

    @app.get("/console/caller", include_in_schema=False)
    async def caller(authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
        """Who the visitor's credential makes them. Always 200, so that a page asking
        before anyone signed in logs no error in the browser."""
        try:
            who = auth.caller(authorization)
        except AuthError as error:
            return {"signed_in": False, "error": str(error) if authorization else None}
        return {
            "signed_in": True,
            "operator": who.operator,
            "sub": who.claims.get("sub"),
            "scope": who.scope_id,
            "auth_required": auth.configured,
        }

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(STATIC / "icon.svg", media_type="image/svg+xml")

    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")


__all__ = ["CONTENT_SECURITY_POLICY", "add_console"]
