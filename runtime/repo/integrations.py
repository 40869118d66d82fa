"""connections/ and `mcp.servers`: the outside systems agents may act on (SPEC 9).

A folder `connections/<name>/` holds `spec.json` and, for a REST connection,
optionally `access.json`, `surface.md` and `rules.md`. A spec with
`"protocol": "mcp"` declares an MCP server instead, with the same fields as
`mcp.servers.<name>` in amodal.json. `env:NAME` values in spec.json are resolved
as in amodal.json, and every resolved value is a secret: it is kept out of
reprs, logs, events and results.
"""

from __future__ import annotations

import base64
import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source
from runtime.repo.bundle import ConnectionDefinition, Endpoint, McpServerDefinition, mcp_prefix
from runtime.repo.config import CONFIG_FILE, Resolved, resolve_env
from runtime.repo.formats import (
    CONNECTION_NAME,
    FOREIGN_CONNECTION_KEYS,
    MCP_SERVER_NAME,
    AccessFile,
    ConnectionSpec,
    McpConnectionSpec,
    McpServer,
    RepoConfig,
)

CONNECTIONS_DIR = "connections"
REST_FILES = ("spec.json", "access.json", "surface.md", "rules.md")
# Tool names `store__...` belong to store tools; a server of that name would collide.
RESERVED_SERVER_NAMES = frozenset({"store"})


EXTRA_HINT = "MCP servers need the `mcp` extra: pip install 'amodal-runtime[mcp]'"


def sdk_available() -> bool:
    """True when the `mcp` SDK is installed (the `mcp` extra); it is not imported here."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["mcp"] is None
        return False


@dataclass
class LoadedConnections:
    rest: dict[str, ConnectionDefinition] = field(default_factory=dict)
    mcp: dict[str, McpServerDefinition] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    """Names declared but failed to load: references to them are not reported again."""


def load_connections(
    reader: Reader,
    config: RepoConfig | None,
    config_secrets: Resolved,
    environ: Mapping[str, str],
    offline: bool,
) -> LoadedConnections:
    """Every REST connection and MCP server of the repo, from both places they may be written."""
    loaded = LoadedConnections()
    if config is not None:
        for name, server in config.mcp.servers.items():
            secrets = [
                v for path, v in config_secrets.items() if path[:3] == ("mcp", "servers", name)
            ]
            definition = _mcp_server(
                reader, name, server, CONFIG_FILE, ("mcp", "servers", name), secrets
            )
            if definition is None:
                loaded.broken.add(name)
            else:
                loaded.mcp[name] = definition
    directory = reader.root / CONNECTIONS_DIR
    if directory.is_dir():
        for entry in sorted(directory.iterdir()):
            spec = entry / "spec.json"
            if not (entry.is_dir() and spec.is_file()):
                reader.report.warn(
                    reader.relative(entry),
                    "ignored: a connection is a folder `connections/<name>/` with spec.json",
                )
                continue
            _load_folder(reader, entry, loaded, environ, offline)
    _check_prefixes(reader.report, loaded.mcp)
    if loaded.mcp and not sdk_available():
        # A warning, not an error: a missing optional part degrades, never blocks. The
        # servers run as `failed` (on /health, in inspect, told to the agent), the rest runs.
        first = min(loaded.mcp.values(), key=lambda server: (server.file, server.name))
        names = ", ".join(sorted(loaded.mcp))
        reader.report.warn(
            first.file,
            f"{EXTRA_HINT}; without it the MCP servers of this repo ({names}) do not start "
            "and their tools are missing (everything else works)",
        )
    return loaded


def _load_folder(
    reader: Reader,
    folder: Path,
    loaded: LoadedConnections,
    environ: Mapping[str, str],
    offline: bool,
) -> None:
    report, name = reader.report, folder.name
    relative = f"{CONNECTIONS_DIR}/{name}/spec.json"
    text = reader.read(relative)
    source = Source(relative, text or "")
    data = report.parse_json(source) if text is not None else None
    if not isinstance(data, dict):
        if data is not None:
            report.error(relative, "must be a JSON object with at least `baseUrl`", line=1)
        loaded.broken.add(name)
        return
    data, resolved = resolve_env(data, source, report, environ, offline)
    secrets = list(resolved.values())
    if data.get("protocol") == "mcp":
        if name in loaded.mcp or name in loaded.broken:
            report.error(
                relative,
                f"MCP server {name!r} is also declared in amodal.json under mcp.servers; "
                "declare it in one place",
            )
            return
        if not MCP_SERVER_NAME.match(name):
            report.error(
                f"{CONNECTIONS_DIR}/{name}",
                f"MCP server name {name!r} must be 1-32 lowercase letters, digits, '-' or '_', "
                "starting with a letter (rename the folder)",
            )
            loaded.broken.add(name)
            return
        _warn_extra_files(reader, folder, ("spec.json",))
        spec = report.validate(McpConnectionSpec, data, source)
        server = _mcp_server(reader, name, spec, relative, (), secrets) if spec else None
        if server is None:
            loaded.broken.add(name)
        else:
            loaded.mcp[name] = server
        return
    if not CONNECTION_NAME.match(name):
        report.error(
            f"{CONNECTIONS_DIR}/{name}",
            f"connection name {name!r} must be 1-64 lowercase letters, digits and hyphens, "
            "starting with a letter (rename the folder)",
        )
        loaded.broken.add(name)
        return
    for key in FOREIGN_CONNECTION_KEYS:
        if key in data:
            report.warn(
                relative,
                f"{key!r} is defined by the reference platform and not implemented by this "
                "runtime; it is ignored",
                line=source.line((key,)),
                field=key,
            )
    _warn_extra_files(reader, folder, REST_FILES)
    rest = report.validate(ConnectionSpec, data, source)
    access, access_ok = _access(reader, name)
    if rest is not None and not _fit_for_the_wire(report, relative, _wire_values(rest), source):
        rest = None
    if rest is None or not access_ok:
        loaded.broken.add(name)
        return
    loaded.rest[name] = _rest(reader, name, rest, access, secrets)


def _wire_values(spec: ConnectionSpec) -> dict[tuple[str, ...], str]:
    """The values of a REST spec that go into a header or a query parameter, by key."""
    auth = spec.auth
    values: dict[tuple[str, ...], str] = {
        ("headers", key): value.get_secret_value() for key, value in spec.headers.items()
    }
    if auth.token is not None:
        values["auth", "token"] = auth.token.get_secret_value()
    if auth.prefix is not None:
        values["auth", "prefix"] = auth.prefix
    return values


def _fit_for_the_wire(
    report: Report, file: str, values: Mapping[tuple[str, ...], str], source: Source | None = None
) -> bool:
    """False after reporting each value that an HTTP header cannot carry. A token read from
    a file often ends in a line break; the HTTP client would refuse it in an error that
    quotes the whole value, so it is refused here, naming the key and never the value."""
    fit = True
    for path, value in values.items():
        bad = next(
            (char for char in value if (ord(char) < 32 and char != "\t") or ord(char) == 127), None
        )
        if bad is None:
            continue
        fit = False
        what = "a line break" if bad in "\r\n" else f"the control character U+{ord(bad):04X}"
        report.error(
            file,
            f"the value of `{'.'.join(path)}` holds {what}, which an HTTP header cannot carry: "
            "strip it where the value is set (a token read from a file often ends in one)",
            line=source.line(path) if source is not None else None,
            field=".".join(path),
        )
    return fit


def _warn_extra_files(reader: Reader, folder: Path, allowed: Iterable[str]) -> None:
    for entry in sorted(folder.iterdir()):
        if entry.name not in allowed and entry.name != "__pycache__":
            expected = ", ".join(allowed)
            reader.report.warn(
                reader.relative(entry), f"ignored: a connection folder holds only {expected}"
            )


def _access(reader: Reader, name: str) -> tuple[AccessFile | None, bool]:
    """access.json (None when there is none), and False when it is broken (reported)."""
    relative = f"{CONNECTIONS_DIR}/{name}/access.json"
    if not (reader.root / relative).is_file():
        return None, True
    text = reader.read(relative)
    source = Source(relative, text or "")
    data = reader.report.parse_json(source) if text is not None else None
    access = reader.report.validate(AccessFile, data, source) if data is not None else None
    return access, access is not None


def _text(reader: Reader, relative: str) -> str | None:
    if not (reader.root / relative).is_file():
        return None
    text = reader.read(relative)
    if text is None:
        return None
    return text.strip() or None


def _rest(
    reader: Reader,
    name: str,
    spec: ConnectionSpec,
    access: AccessFile | None,
    resolved: list[str],
) -> ConnectionDefinition:
    auth = spec.auth
    token = auth.token.get_secret_value() if auth.token else ""
    headers = {key: value.get_secret_value() for key, value in spec.headers.items()}
    query: dict[str, str] = {}
    if auth.type == "bearer":
        headers["Authorization"] = f"{auth.prefix or 'Bearer'} {token}"
    elif auth.type == "header" and auth.header:
        headers[auth.header] = f"{auth.prefix} {token}" if auth.prefix else token
    elif auth.type == "api_key":
        if auth.query_param:
            query[auth.query_param] = token
        else:
            headers[auth.header or "X-API-Key"] = f"{auth.prefix} {token}" if auth.prefix else token
    elif auth.type == "basic" and auth.password is not None:
        pair = f"{auth.username}:{auth.password.get_secret_value()}".encode()
        encoded = base64.b64encode(pair).decode()
        headers["Authorization"] = "Basic " + encoded
        resolved = [*resolved, encoded]  # an API may echo the pair without its `Basic `
    secrets = {*resolved, token, *headers.values(), *query.values()}
    if auth.password is not None:
        secrets.add(auth.password.get_secret_value())
    endpoints = (
        tuple(Endpoint(e.method, e.path, e.confirm) for e in access.endpoints) if access else ()
    )
    folder = f"{CONNECTIONS_DIR}/{name}"
    return ConnectionDefinition(
        name=name,
        base_url=spec.base_url.rstrip("/"),
        auth_type=auth.type,
        timeout=spec.timeout,
        max_response_bytes=spec.max_response_bytes,
        test_path=spec.test_path,
        injections=spec.context_injection,
        default_access=access.default if access else "allow-read",
        endpoints=endpoints,
        surface=_text(reader, f"{folder}/surface.md"),
        rules=_text(reader, f"{folder}/rules.md"),
        file=f"{folder}/spec.json",
        auth_headers=MappingProxyType(headers),
        auth_query=MappingProxyType(query),
        secrets=_secret_values(secrets),
    )


def _mcp_server(
    reader: Reader,
    name: str,
    server: McpServer,
    file: str,
    path: tuple[str, ...],
    resolved: list[str],
) -> McpServerDefinition | None:
    report = reader.report
    field_ = ".".join(path)
    if path and not MCP_SERVER_NAME.match(name):
        report.error(
            file,
            f"MCP server name {name!r} must be 1-32 lowercase letters, digits, '-' or '_', "
            "starting with a letter",
            field=field_,
        )
        return None
    if name in RESERVED_SERVER_NAMES:
        report.error(
            file,
            f"an MCP server may not be named {name!r}: its tools would collide with store tools",
            field=field_,
        )
        return None
    cwd = None
    if server.cwd is not None:
        cwd = (reader.root / server.cwd).resolve()
        if not cwd.is_dir():
            report.error(
                file,
                f"`cwd` {server.cwd!r} is not a folder (it is relative to the repo)",
                field=".".join((*path, "cwd")) if path else "cwd",
            )
            return None
    env = {key: value.get_secret_value() for key, value in server.env.items()}
    headers = {key: value.get_secret_value() for key, value in server.headers.items()}
    wire = {(*path, "headers", key): value for key, value in headers.items()}
    if not _fit_for_the_wire(report, file, wire):
        return None
    confirm = server.confirm if isinstance(server.confirm, bool) else frozenset(server.confirm)
    return McpServerDefinition(
        name=name,
        transport=server.transport,
        command=server.command,
        args=server.args,
        cwd=cwd,
        url=server.url,
        timeout=server.timeout,
        allowed=frozenset(server.tools) if server.tools is not None else None,
        confirm=confirm,
        file=file,
        max_result_bytes=server.max_result_bytes,
        env=MappingProxyType(env),
        headers=MappingProxyType(headers),
        secrets=_secret_values({*resolved, *env.values(), *headers.values()}),
    )


def _secret_values(values: Iterable[str]) -> tuple[str, ...]:
    # Longest first, so a secret that contains another is scrubbed whole.
    return tuple(sorted({value for value in values if value}, key=len, reverse=True))


def _check_prefixes(report: Report, servers: Mapping[str, McpServerDefinition]) -> None:
    """Two servers collide when one's tool-name prefix starts with the other's: `my-db` and
    `my_db` both name tools `my_db__<tool>`, and `docs__admin`'s tool `delete` and
    `docs`'s tool `admin__delete` would both be `docs__admin__delete`."""
    names = sorted(servers)
    for name in names:
        prefix = mcp_prefix(name)
        for other in names:
            theirs = mcp_prefix(other)
            if other != name and prefix.startswith(theirs) and (theirs != prefix or other < name):
                report.error(
                    servers[name].file,
                    f"MCP servers {other!r} and {name!r} could give two tools one name: "
                    f"every tool of {name!r} is named `{prefix}<tool>`, a name a tool of "
                    f"{other!r} (`{theirs}<tool>`) can have too; rename one",
                )
                break
