"""The console's routes over HTTP, without a browser: headers, escaping, who the caller is.

Against the same `amodal serve` processes as the browser tests (tests/console/conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.server.console import CONTENT_SECURITY_POLICY
from tests.console.conftest import ALICE_KEY, OPERATOR_TOKEN, Desk
from tests.server.conftest import ServeProcess

PAGES = [
    "/",
    "/console/agents/reviewer",
    "/console/chat",
    "/console/sessions",
    "/console/sessions/abc123",
    "/console/stores",
    "/console/health",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_is_html_under_a_strict_content_security_policy(desk: Desk, path: str) -> None:
    response = httpx.get(desk.url + path)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    # Nothing inline that the policy would block: scripts and styles come from files.
    html = response.text
    assert re.findall(r"<script(?![^>]*\bsrc=)", html) == []
    assert not re.search(r"\sstyle=|\son[a-z]+=|<style", html)
    assert "http://" not in html and "https://" not in html  # nothing from elsewhere


def test_a_page_renders_a_name_from_the_address_as_text(desk: Desk) -> None:
    response = httpx.get(
        desk.url + "/console/agents/%3Cimg%20src%3Dx%20onerror%3D%22alert(1)%22%3E"
    )

    assert response.status_code == 200
    assert "<img" not in response.text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in response.text


def test_the_console_stays_out_of_the_openapi_document(desk: Desk) -> None:
    paths = httpx.get(desk.url + "/openapi.json").json()["paths"]

    assert "/sessions" in paths
    assert not [path for path in paths if path == "/" or path.startswith("/console")]


def test_scripts_styles_and_the_icon_are_served_from_the_package(
    desk: Desk,
) -> None:
    script = httpx.get(desk.url + "/console/static/chat.js")
    style = httpx.get(desk.url + "/console/static/console.css")
    icon = httpx.get(desk.url + "/favicon.ico")

    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert "text/css" in style.headers["content-type"]
    assert icon.headers["content-type"] == "image/svg+xml"
    missing = httpx.get(desk.url + "/console/static/nope.js")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_the_caller_route_says_who_a_credential_makes_the_visitor(
    desk: Desk,
) -> None:
    def who(token: str | None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx.get(desk.url + "/console/caller", headers=headers)
        assert response.status_code == 200  # never an error the browser would log
        body: dict[str, Any] = response.json()
        return body

    assert who(None) == {"signed_in": False, "error": None}
    assert who("wrong") == {"signed_in": False, "error": "invalid credentials"}
    assert who(OPERATOR_TOKEN) == {
        "signed_in": True,
        "operator": True,
        "sub": None,
        "scope": "default",
        "auth_required": True,
    }
    alice = who(ALICE_KEY)
    assert (alice["operator"], alice["sub"], alice["scope"]) == (False, "alice", "acme")


def test_on_loopback_without_auth_the_visitor_is_the_operator(
    example_server: ServeProcess,
) -> None:
    response = httpx.get(example_server.url + "/console/caller")

    assert response.json() == {
        "signed_in": True,
        "operator": True,
        "sub": None,
        "scope": "default",
        "auth_required": False,
    }


def test_the_console_ships_inside_the_package() -> None:
    import runtime.server.console

    package = Path(runtime.server.console.__file__).parent
    scripts = {path.name for path in (package / "static").glob("*.js")}
    pages = {path.stem for path in (package / "templates").glob("*.html")}

    assert {"api.js", "sse.js", "transcript.js", "tree.js"} <= scripts
    # Each page's template loads the script of the same name.
    assert pages - {"base"} <= {name.removesuffix(".js") for name in scripts}
