"""Resolving what one agent may use for one caller (SPEC 4)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import Bundle, load_bundle, load_repo
from runtime.repo.registry import store_tool_name
from runtime.surface import resolution as surface_module
from runtime.surface.resolution import Exclusion, Surface, SurfaceContext, resolve

PROTOCOL = {"stop_execution", "ask_choice"}
NOTE_SCHEMA = {"id": {"type": "string"}, "text": {"type": "string"}}
OBJECT = {"type": "object", "properties": {}}


def store_file(*, shared: bool = False) -> dict[str, Any]:
    entity = {"name": "Note", "key": "{id}", "schema": NOTE_SCHEMA}
    return {"entity": entity, "shared": True} if shared else {"entity": entity}


def skill_file(name: str, *tools: str) -> str:
    listed = ", ".join(tools)
    return (
        f"---\nname: {name}\ndescription: {name} things.\nallowedTools: [{listed}]\n---\n\nDo it.\n"
    )


def caller(
    agent: str,
    claims: dict[str, str] | None = None,
    context: dict[str, str] | None = None,
    **flags: bool,
) -> SurfaceContext:
    return SurfaceContext.for_caller(agent, claims, context, **flags)


def surface_of(bundle: Bundle, agent: str, **kwargs: Any) -> Surface:
    return resolve(bundle, agent, caller(agent, **kwargs), root=agent)


def excluded(surface: Surface, kind: str, name: str) -> Exclusion:
    found = [item for item in surface.excluded if (item.kind, item.name) == (kind, name)]
    assert len(found) == 1, surface.excluded
    return found[0]


@pytest.fixture(autouse=True)
def fresh_resolution_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # Resolution is cached process-wide by bundle version, and two tests that write the
    # same files get the same version: each test starts from an empty cache so that
    # predicate runs and `predicate_excluded` logs are its own.
    monkeypatch.setattr(surface_module, "_CACHE", surface_module._LruCache(256))


# --- SurfaceContext -----------------------------------------------------------------


def test_surface_context_is_frozen() -> None:
    ctx = caller("reviewer", {"role": "viewer"}, {"page": "home"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.claims = {"role": "manager"}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.is_subagent = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        ctx.claims["role"] = "manager"  # type: ignore[index]
    with pytest.raises(TypeError):
        ctx.context["page"] = "admin"  # type: ignore[index]


def test_surface_context_does_not_share_the_callers_dicts() -> None:
    claims = {"role": "viewer"}
    ctx = caller("reviewer", claims)
    claims["role"] = "manager"
    assert ctx.claims["role"] == "viewer"


def test_scope_user_and_org_come_from_the_scope_sub_and_org_claims() -> None:
    ctx = caller("reviewer", {"scope": "acme-prod", "sub": "user-7", "org": "acme"})
    assert (ctx.scope_id, ctx.user_id, ctx.org_id) == ("acme-prod", "user-7", "acme")
    assert ctx.human_present is True
    assert ctx.is_subagent is False
    assert ctx.agent_name == "reviewer"


def test_without_claims_the_caller_has_the_default_scope_and_no_user_or_org() -> None:
    ctx = caller("reviewer")
    assert (ctx.scope_id, ctx.user_id, ctx.org_id) == ("default", None, None)


def test_request_context_never_sets_scope_user_or_org() -> None:
    ctx = caller("reviewer", context={"scope": "other", "sub": "admin", "org": "evil"})
    assert (ctx.scope_id, ctx.user_id, ctx.org_id) == ("default", None, None)
    assert dict(ctx.claims) == {}


def test_a_specialist_inherits_the_callers_context_marked_as_subagent() -> None:
    parent = caller(
        "default", {"scope": "s1", "sub": "u1", "org": "o1"}, {"page": "review"},
        human_present=False,
    )  # fmt: skip
    child = parent.for_specialist("reviewer")
    assert child.is_subagent is True
    assert child.agent_name == "reviewer"
    assert dict(child.claims) == dict(parent.claims)
    assert dict(child.context) == {"page": "review"}
    assert (child.scope_id, child.user_id, child.org_id) == ("s1", "u1", "o1")
    assert child.human_present is False
    assert parent.is_subagent is False
    assert parent.agent_name == "default"


# --- predicates ---------------------------------------------------------------------

GATED_AGENT_PY = """\
SEEN = []


async def _later():
    return True


class _Awaitable:
    def __await__(self):
        return iter(())


def gate(ctx):
    {body}


agent = {{"tools": ["load_skill", {{"name": "load_knowledge", "conditional": gate}}]}}
"""


def gated_bundle(make_repo: Callable[..., Path], body: str) -> Bundle:
    return load_bundle(
        make_repo(
            {
                "agents/gated/AGENT.md": "Gated.\n",
                "agents/gated/agent.py": GATED_AGENT_PY.format(body=body),
            }
        )
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("return False", "returned False, not True"),
        ("return 1", "returned 1, not True"),
        ('return "yes"', "returned 'yes', not True"),
        ('return "True"', "returned 'True', not True"),
        ("return None", "returned None, not True"),
        ("return [True]", "returned [True], not True"),
        ('raise RuntimeError("lookup failed")', "raised RuntimeError: lookup failed"),
        ("raise SystemExit(3)", "raised SystemExit: 3"),
        ('return ctx.claims["role"] == "manager"', "raised KeyError 'role'"),
        ("return _later()", "returned an awaitable"),
        ("return _Awaitable()", "returned an awaitable"),
    ],
    ids=["False", "1", "yes", "str-True", "None", "list", "raises", "exits", "missing-claim",
         "coroutine", "awaitable"],
)  # fmt: skip
def test_a_predicate_includes_its_entry_only_on_exact_true(
    make_repo: Callable[..., Path],
    events: Callable[[str], list[logging.LogRecord]],
    body: str,
    reason: str,
) -> None:
    bundle = gated_bundle(make_repo, body)
    surface = surface_of(bundle, "gated")

    assert "load_knowledge" not in surface.tools
    assert surface.tools == PROTOCOL | {"load_skill"}
    exclusion = excluded(surface, "tool", "load_knowledge")
    assert reason in exclusion.reason
    assert "gate" in exclusion.reason
    assert "agents/gated/agent.py" in exclusion.reason
    [record] = events("predicate_excluded")
    assert record.levelno == logging.INFO
    assert (record.agent, record.entry, record.reason) == (  # type: ignore[attr-defined]
        "gated", "load_knowledge", exclusion.reason,
    )  # fmt: skip


def test_a_predicate_returning_true_includes_its_entry_and_logs_nothing(
    make_repo: Callable[..., Path], events: Callable[[str], list[logging.LogRecord]]
) -> None:
    surface = surface_of(gated_bundle(make_repo, "return True"), "gated")
    assert surface.tools == PROTOCOL | {"load_skill", "load_knowledge"}
    assert surface.excluded == ()
    assert events("predicate_excluded") == []


def test_a_coroutine_returned_by_a_predicate_is_closed_not_left_pending(
    make_repo: Callable[..., Path],
) -> None:
    bundle = gated_bundle(make_repo, "SEEN.append(_later()); return SEEN[-1]")
    surface_of(bundle, "gated")
    [predicate] = [entry.conditional for entry in bundle.agents["gated"].tools if entry.conditional]
    [coroutine] = predicate.__globals__["SEEN"]  # type: ignore[union-attr]
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


@pytest.mark.parametrize(
    ("kind", "declaration"),
    [
        ("tool", '"tools": [{"name": "load_knowledge", "conditional": never}]'),
        ("skill", '"skills": [{"name": "Notes", "conditional": never}]'),
        ("subagent", '"subagents": [{"name": "helper", "conditional": never}]'),
        ("store", '"stores": {"notes": {"mode": "rw", "conditional": never}}'),
        ("connection", '"connections": [{"name": "crm", "conditional": never}]'),
        ("mcp", '"mcp": [{"name": "docs", "conditional": never}]'),
    ],
)
def test_every_kind_of_declared_entry_can_be_excluded_by_its_predicate(
    make_repo: Callable[..., Path],
    events: Callable[[str], list[logging.LogRecord]],
    kind: str,
    declaration: str,
) -> None:
    root = make_repo(
        {
            "amodal.json": {
                "name": "t",
                "version": "1",
                "mcp": {"servers": {"docs": {"transport": "stdio", "command": "docs-server"}}},
            },
            "connections/crm/spec.json": {"baseUrl": "https://crm.example"},
            "stores/notes.json": store_file(),
            "skills/notes/SKILL.md": skill_file("Notes", "load_knowledge"),
            "agents/helper/AGENT.md": "Help.\n",
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.py": (
                f"def never(ctx):\n    return False\n\n\nagent = {{{declaration}}}\n"
            ),
        }
    )
    surface = surface_of(load_bundle(root), "gated")
    name = {"tool": "load_knowledge", "skill": "Notes", "subagent": "helper", "store": "notes",
            "connection": "crm", "mcp": "docs"}[kind]  # fmt: skip
    assert "returned False" in excluded(surface, kind, name).reason  # type: ignore[arg-type]
    granted = {
        "tool": surface.tools, "skill": surface.skills, "subagent": surface.subagents,
        "store": surface.stores, "connection": surface.connections, "mcp": surface.mcp,
    }  # fmt: skip
    assert name not in granted[kind]
    assert surface.tools == PROTOCOL
    [record] = events("predicate_excluded")
    assert (record.agent, record.entry) == ("gated", name)  # type: ignore[attr-defined]


def test_a_permission_predicate_reading_claims_ignores_the_request_context(
    example_repo: Path,
) -> None:
    bundle = load_bundle(example_repo)
    decisions_put = store_tool_name("decisions", "put")

    from_context = surface_of(bundle, "reviewer", context={"role": "manager"})
    assert "decisions" not in from_context.stores
    assert decisions_put not in from_context.tools
    assert "KeyError 'role'" in excluded(from_context, "store", "decisions").reason

    wrong_claim = surface_of(bundle, "reviewer", claims={"role": "viewer"})
    assert "returned False" in excluded(wrong_claim, "store", "decisions").reason

    from_claim = surface_of(bundle, "reviewer", claims={"role": "manager"})
    assert from_claim.stores["decisions"] == "rw"
    assert decisions_put in from_claim.tools
    assert all(item.name != "decisions" for item in from_claim.excluded)


def test_a_curation_predicate_must_allow_delegation_explicitly(example_repo: Path) -> None:
    bundle = load_bundle(example_repo)
    as_root = surface_of(bundle, "reviewer")
    on_page = surface_of(bundle, "reviewer", context={"page": "review"})
    delegated = resolve(
        bundle, "reviewer", caller("default").for_specialist("reviewer"), root="default"
    )
    assert "word_count" not in as_root.tools
    assert "word_count" in on_page.tools
    assert "word_count" in delegated.tools


PREDICATES_TRY_TO_ADD = """\
def everything(ctx):
    return True


def grant_more(ctx):
    return ["store__notes__put", "helper", "word_count"]


def mutate(ctx):
    ctx.claims["role"] = "admin"
    return True


def never(ctx):
    return False


agent = {
    "tools": [
        {"name": "load_knowledge", "conditional": everything},
        {"name": "load_skill", "conditional": grant_more},
        {"name": "word_count", "conditional": mutate},
        {"name": "ask_choice", "conditional": never},
    ],
}
"""


def test_predicates_cannot_add_anything_undeclared(make_repo: Callable[..., Path]) -> None:
    root = make_repo(
        {
            "stores/notes.json": store_file(),
            "skills/notes/SKILL.md": skill_file("Notes", "load_knowledge"),
            "agents/helper/AGENT.md": "Help.\n",
            "tools/word_count/tool.json": {"description": "Count words.", "parameters": OBJECT},
            "tools/word_count/handler.py": "async def handler(args, ctx):\n    return 0\n",
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.py": PREDICATES_TRY_TO_ADD,
        }
    )
    bundle = load_bundle(root)
    ctx = caller("gated")
    surface = resolve(bundle, "gated", ctx, root="gated")

    assert surface.tools == PROTOCOL | {"load_knowledge"}
    assert (surface.skills, surface.subagents, dict(surface.stores)) == ((), (), {})
    assert "returned ['store__notes__put'" in excluded(surface, "tool", "load_skill").reason
    assert "raised TypeError" in excluded(surface, "tool", "word_count").reason
    assert "role" not in ctx.claims  # the predicate could not change the caller
    assert "ask_choice" in surface.tools  # and a protocol tool cannot be taken away


# --- skills and their allowedTools --------------------------------------------------


def skills_repo(make_repo: Callable[..., Path], agent: str) -> Bundle:
    return load_bundle(
        make_repo(
            {
                "skills/notes/SKILL.md": skill_file("Notes", "load_knowledge"),
                "skills/other/SKILL.md": skill_file("Other", "load_knowledge"),
                "agents/gated/AGENT.md": "Gated.\n",
                "agents/gated/agent.py": (
                    "def never(ctx):\n    return False\n\n\ndef always(ctx):\n    return True\n\n\n"
                    + agent
                ),
            }
        )
    )


def test_an_included_skill_contributes_its_allowed_tools(make_repo: Callable[..., Path]) -> None:
    bundle = skills_repo(
        make_repo, 'agent = {"tools": ["load_skill"], '
        '"skills": [{"name": "Notes", "conditional": always}]}\n'
    )  # fmt: skip
    surface = surface_of(bundle, "gated")
    assert surface.skills == ("Notes",)
    assert surface.tools == PROTOCOL | {"load_skill", "load_knowledge"}


def test_a_skill_excluded_by_its_predicate_removes_its_allowed_tools(
    make_repo: Callable[..., Path],
) -> None:
    bundle = skills_repo(
        make_repo, 'agent = {"tools": ["load_skill"], '
        '"skills": [{"name": "Notes", "conditional": never}]}\n'
    )  # fmt: skip
    surface = surface_of(bundle, "gated")
    assert surface.skills == ()
    assert surface.tools == PROTOCOL | {"load_skill"}
    assert "returned False" in excluded(surface, "skill", "Notes").reason
    assert "skill 'Notes'" in excluded(surface, "tool", "load_knowledge").reason


def test_a_tool_of_an_excluded_skill_stays_when_the_agent_declares_it(
    make_repo: Callable[..., Path],
) -> None:
    bundle = skills_repo(
        make_repo, 'agent = {"tools": ["load_skill", "load_knowledge"], '
        '"skills": [{"name": "Notes", "conditional": never}]}\n'
    )  # fmt: skip
    surface = surface_of(bundle, "gated")
    assert "load_knowledge" in surface.tools
    assert [(item.kind, item.name) for item in surface.excluded] == [("skill", "Notes")]


def test_a_tool_of_an_excluded_skill_stays_when_another_included_skill_grants_it(
    make_repo: Callable[..., Path],
) -> None:
    bundle = skills_repo(
        make_repo, 'agent = {"tools": ["load_skill"], '
        '"skills": [{"name": "Notes", "conditional": never}, "Other"]}\n'
    )  # fmt: skip
    surface = surface_of(bundle, "gated")
    assert surface.skills == ("Other",)
    assert "load_knowledge" in surface.tools
    assert [(item.kind, item.name) for item in surface.excluded] == [("skill", "Notes")]


def test_a_tool_whose_own_entry_is_excluded_stays_when_an_included_skill_grants_it(
    make_repo: Callable[..., Path],
) -> None:
    bundle = skills_repo(
        make_repo, 'agent = {"tools": [{"name": "load_knowledge", "conditional": never}], '
        '"skills": ["Notes"]}\n'
    )  # fmt: skip
    surface = surface_of(bundle, "gated")
    assert "load_knowledge" in surface.tools
    # What the caller gets is never listed as excluded.
    assert all(item.name != "load_knowledge" for item in surface.excluded)


# --- stores -------------------------------------------------------------------------


def store_tools(store: str, *ops: str) -> set[str]:
    return {store_tool_name(store, op) for op in ops}  # type: ignore[arg-type]


def stores_repo(make_repo: Callable[..., Path], agent_py: str) -> Bundle:
    return load_bundle(
        make_repo(
            {
                "stores/research-notes.json": store_file(),
                "stores/reference.json": store_file(shared=True),
                "agents/gated/AGENT.md": "Gated.\n",
                "agents/gated/agent.py": (
                    "def never(ctx):\n    return False\n\n\n"
                    "def manager(ctx):\n    return ctx.claims['role'] == 'manager'\n\n\n" + agent_py
                ),
            }
        )
    )


def test_a_read_store_gives_get_and_query_only(make_repo: Callable[..., Path]) -> None:
    surface = surface_of(
        stores_repo(make_repo, 'agent = {"stores": {"research-notes": "read"}}\n'), "gated"
    )
    assert dict(surface.stores) == {"research-notes": "read"}
    assert surface.tools == PROTOCOL | store_tools("research-notes", "get", "query")
    assert "store__research_notes__query" in surface.tools  # hyphens become underscores


def test_an_rw_store_gives_all_four_store_tools(make_repo: Callable[..., Path]) -> None:
    surface = surface_of(
        stores_repo(make_repo, 'agent = {"stores": {"research-notes": {"mode": "rw"}}}\n'), "gated"
    )
    assert dict(surface.stores) == {"research-notes": "rw"}
    assert surface.tools == PROTOCOL | store_tools(
        "research-notes", "get", "query", "put", "delete"
    )


def test_an_excluded_store_gives_no_store_tools_even_when_listed_in_tools(
    make_repo: Callable[..., Path],
) -> None:
    bundle = stores_repo(
        make_repo,
        'agent = {"tools": ["store__research_notes__get", "store__research_notes__put"], '
        '"stores": {"research-notes": {"mode": "rw", "conditional": manager}}}\n',
    )
    viewer = surface_of(bundle, "gated", claims={"role": "viewer"})
    assert viewer.stores == {}
    assert viewer.tools == PROTOCOL
    assert {item.name for item in viewer.excluded} == {
        "research-notes", "store__research_notes__get", "store__research_notes__put",
    }  # fmt: skip
    manager = surface_of(bundle, "gated", claims={"role": "manager"})
    assert manager.tools == PROTOCOL | store_tools(
        "research-notes", "get", "query", "put", "delete"
    )


def test_a_shared_store_resolves_read_only_even_when_declared_rw(
    make_repo: Callable[..., Path],
) -> None:
    bundle = stores_repo(
        make_repo,
        'agent = {"tools": ["store__reference__put"], "stores": {"reference": "rw"}}\n',
    )
    surface = surface_of(bundle, "gated")
    assert dict(surface.stores) == {"reference": "read"}
    assert surface.tools == PROTOCOL | store_tools("reference", "get", "query")
    assert "store__reference__put" in {item.name for item in surface.excluded}


def test_a_store_tool_from_a_skill_never_escalates_beyond_the_store_mode(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo(
        {
            "stores/notes.json": store_file(),
            "skills/writer/SKILL.md": skill_file(
                "Writer", "store__notes__put", "store__notes__delete"
            ),
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.json": {"skills": ["Writer"], "stores": {"notes": "read"}},
        }
    )  # fmt: skip
    surface = surface_of(load_bundle(root), "gated")
    assert dict(surface.stores) == {"notes": "read"}
    assert surface.tools == PROTOCOL | store_tools("notes", "get", "query")


def test_a_store_tool_of_an_excluded_skill_stays_when_its_store_is_granted(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo(
        {
            "stores/notes.json": store_file(),
            "skills/reader/SKILL.md": skill_file("Reader", "store__notes__query"),
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.py": (
                "def never(ctx):\n    return False\n\n\n"
                'agent = {"skills": [{"name": "Reader", "conditional": never}], '
                '"stores": {"notes": "read"}}\n'
            ),
        }
    )
    surface = surface_of(load_bundle(root), "gated")
    assert surface.tools == PROTOCOL | store_tools("notes", "get", "query")
    assert [(item.kind, item.name) for item in surface.excluded] == [("skill", "Reader")]


def test_a_store_tool_without_its_store_is_never_granted_by_a_skill(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo(
        {
            "stores/notes.json": store_file(),
            "skills/writer/SKILL.md": skill_file("Writer", "store__notes__get"),
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.json": {"skills": ["Writer"]},
        }
    )
    surface = surface_of(load_bundle(root), "gated")
    assert surface.tools == PROTOCOL
    assert "store__notes__get" in {item.name for item in surface.excluded}


# --- protocol tools and specialists ----------------------------------------------------


def test_protocol_tools_are_present_for_an_agent_that_declares_nothing(
    make_repo: Callable[..., Path],
) -> None:
    surface = surface_of(load_bundle(make_repo()), "default")
    assert surface.tools == PROTOCOL
    assert surface.excluded == ()


def test_call_subagent_is_offered_only_with_a_callable_specialist(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo(
        {
            "agents/helper/AGENT.md": "Help.\n",
            "agents/lead/AGENT.md": "Lead.\n",
            "agents/lead/agent.json": {"subagents": ["helper"]},
            "agents/gated/AGENT.md": "Gated.\n",
            "agents/gated/agent.py": (
                "def never(ctx):\n    return False\n\n\n"
                'agent = {"subagents": [{"name": "helper", "conditional": never}]}\n'
            ),
        }
    )
    bundle = load_bundle(root)
    lead = surface_of(bundle, "lead")
    assert lead.subagents == ("helper",)
    assert lead.tools == PROTOCOL | {"call_subagent"}
    gated = surface_of(bundle, "gated")
    assert gated.subagents == ()
    assert gated.tools == PROTOCOL


def test_the_active_root_is_never_callable_as_a_specialist(make_repo: Callable[..., Path]) -> None:
    root = make_repo(
        {
            "agents/loop/AGENT.md": "Loop.\n",
            "agents/loop/agent.json": {"subagents": ["loop"]},
            "agents/lead/AGENT.md": "Lead.\n",
            "agents/lead/agent.json": {"subagents": ["helper"]},
            "agents/helper/AGENT.md": "Help.\n",
            "agents/helper/agent.json": {"subagents": ["lead"]},
        }
    )
    bundle = load_bundle(root)
    loop = surface_of(bundle, "loop")
    assert loop.subagents == ()
    assert "call_subagent" not in loop.tools
    assert "never callable" in excluded(loop, "subagent", "loop").reason

    # A specialist of the root cannot call the root back either.
    helper = resolve(bundle, "helper", caller("lead").for_specialist("helper"), root="lead")
    assert helper.subagents == ()
    assert "call_subagent" not in helper.tools
    assert "never callable" in excluded(helper, "subagent", "lead").reason


@pytest.mark.parametrize("reserved", ["default", "main"])
def test_default_and_main_are_never_declarable_as_specialists(
    make_repo: Callable[..., Path], reserved: str
) -> None:
    root = make_repo(
        {
            "agents/main/AGENT.md": "Operator console.\n",
            "agents/lead/AGENT.md": "Lead.\n",
            "agents/lead/agent.json": {"subagents": [reserved]},
        }
    )
    result = load_repo(root)
    assert result.bundle is None
    [error] = result.errors
    assert error.file == "agents/lead/agent.json"
    assert "never callable as a specialist" in error.message


# --- unscoped chat ------------------------------------------------------------------


def unscoped(bundle: Bundle) -> Surface:
    return resolve(bundle, "main", caller("main"))


def test_unscoped_chat_exposes_every_resource_but_main_and_default(example_repo: Path) -> None:
    bundle = load_bundle(example_repo)
    surface = unscoped(bundle)
    assert surface.unscoped
    assert surface.agent == "main"
    assert dict(surface.stores) == {"decisions": "rw", "research-notes": "rw"}
    assert surface.skills == ("Cite Sources", "Craft Greeting")
    assert surface.subagents == ("researcher", "reviewer", "writer")
    assert surface.connections == ("library",)
    # Without a running runtime no MCP server is connected: said, not hidden.
    assert [e.as_json() for e in surface.excluded] == [
        {"kind": "mcp", "name": "almanac", "reason": "server not connected"}
    ]
    every_store_tool = store_tools("decisions", "get", "query", "put", "delete") | store_tools(
        "research-notes", "get", "query", "put", "delete"
    )
    # agents/main/agent.json opts into read_file, list_files and propose_source_change.
    assert surface.tools == (
        PROTOCOL
        | every_store_tool
        | {"call_subagent", "load_skill", "load_knowledge", "word_count", "request"}
        | {"read_file", "list_files", "propose_source_change"}
    )
    assert "write_file" not in surface.tools


def test_unscoped_chat_reads_shared_stores_only(make_repo: Callable[..., Path]) -> None:
    root = make_repo(
        {"stores/notes.json": store_file(), "stores/ref.json": store_file(shared=True)}
    )
    surface = unscoped(load_bundle(root))
    assert dict(surface.stores) == {"notes": "rw", "ref": "read"}
    assert store_tools("ref", "put", "delete").isdisjoint(surface.tools)


def test_unscoped_chat_has_no_file_tools_without_main_opting_in(
    make_repo: Callable[..., Path],
) -> None:
    without_main = unscoped(load_bundle(make_repo()))
    assert without_main.tools == PROTOCOL | {"load_skill", "load_knowledge"}
    root = make_repo({"agents/main/AGENT.md": "Operator console.\n"})
    assert unscoped(load_bundle(root)).tools == without_main.tools


def test_unscoped_chat_gets_only_the_file_tools_main_lists(make_repo: Callable[..., Path]) -> None:
    root = make_repo(
        {
            "agents/main/AGENT.md": "Operator console.\n",
            "agents/main/agent.json": {"tools": ["write_file"], "description": "ignored"},
        }
    )
    result = load_repo(root)
    assert result.bundle is not None
    assert unscoped(result.bundle).tools == PROTOCOL | {
        "load_skill",
        "load_knowledge",
        "write_file",
    }
    [warning] = [w for w in result.warnings if w.file == "agents/main/agent.json"]
    assert "'description' is ignored" in warning.message


def test_main_agent_json_is_ignored_when_main_has_no_prompt(make_repo: Callable[..., Path]) -> None:
    root = make_repo(
        {"agents/main/AGENT.md": "\n", "agents/main/agent.json": {"tools": ["read_file"]}}
    )
    surface = unscoped(load_bundle(root))
    assert "read_file" not in surface.tools


def test_unscoped_surface_does_not_depend_on_claims_or_context(example_repo: Path) -> None:
    bundle = load_bundle(example_repo)
    plain = unscoped(bundle)
    other = resolve(bundle, "main", caller("main", {"role": "viewer"}, {"page": "x"}))
    assert (other.tools, other.stores, other.subagents) == (
        plain.tools, plain.stores, plain.subagents,
    )  # fmt: skip


# --- caching ------------------------------------------------------------------------

COUNTED_AGENT_PY = """\
CALLS = []


def counted(ctx):
    CALLS.append(ctx.agent_name)
    return ctx.claims.get("role") == "manager"


agent = {"tools": [{"name": "load_knowledge", "conditional": counted}]}
"""


def predicate_calls(bundle: Bundle) -> list[str]:
    [entry] = bundle.agents["counted"].tools
    assert entry.conditional is not None
    calls: list[str] = entry.conditional.__globals__["CALLS"]  # type: ignore[attr-defined]
    return calls


def test_resolution_is_cached_per_bundle_version_agent_claims_and_context(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo(
        {"agents/counted/AGENT.md": "Counted.\n", "agents/counted/agent.py": COUNTED_AGENT_PY}
    )
    bundle = load_bundle(root)
    manager = {"role": "manager"}

    first = surface_of(bundle, "counted", claims=manager, context={"page": "a"})
    again = surface_of(bundle, "counted", claims=manager, context={"page": "a"})
    assert again is first
    assert len(predicate_calls(bundle)) == 1

    surface_of(bundle, "counted", claims={"role": "viewer"}, context={"page": "a"})
    assert len(predicate_calls(bundle)) == 2
    surface_of(bundle, "counted", claims=manager, context={"page": "b"})
    assert len(predicate_calls(bundle)) == 3

    # The same files load as the same version: the cached surface is reused.
    same = load_bundle(root)
    assert same.version == bundle.version
    assert surface_of(same, "counted", claims=manager, context={"page": "a"}) is first
    assert predicate_calls(same) == []

    # A new bundle version resolves again.
    (root / "agents/counted/AGENT.md").write_text("Counted, edited.\n", encoding="utf-8")
    newer = load_bundle(root)
    assert newer.version != bundle.version
    surface_of(newer, "counted", claims=manager, context={"page": "a"})
    assert len(predicate_calls(newer)) == 1


def test_a_surface_has_a_fingerprint_of_what_was_granted(example_repo: Path) -> None:
    bundle = load_bundle(example_repo)
    viewer = surface_of(bundle, "reviewer", claims={"role": "viewer"})
    nobody = surface_of(bundle, "reviewer")
    manager = surface_of(bundle, "reviewer", claims={"role": "manager"})
    assert viewer.fingerprint == nobody.fingerprint  # same grants, different reasons
    assert manager.fingerprint != viewer.fingerprint
