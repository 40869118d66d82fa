"""`/agents`: the repo's agents and what each may use for a caller (SPEC 14;
docs/http-api.md).

- `GET /agents[?role=]`: name, display name, description, summary, role, `default`;
- `GET /agents/{name}`: one of them (404 `unknown_agent` listing the known ones);
- `GET /agents/{name}/surface?context.K=V`: its surface for the caller's claims, in the
  shape of `amodal inspect --json`; an operator may pass `?claim.K=V` to see another
  caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, Request

from runtime.exceptions import UnknownAgentError
from runtime.repo.bundle import AgentDefinition
from runtime.server.dependencies import CallerDep, RuntimeDep, caller
from runtime.server.errors import ApiError
from runtime.server.openapi import answers
from runtime.surface.caller import Caller

router = APIRouter()


@router.get("/agents", dependencies=[Depends(caller)])
async def agents(runtime: RuntimeDep, role: str | None = None) -> list[dict[str, Any]]:
    bundle = runtime.bundle
    wanted = role.lower() if role else None
    return [
        _agent_json(bundle.agents[name])
        for name in sorted(bundle.agents)
        if wanted is None or (bundle.agents[name].role or "").lower() == wanted
    ]


@router.get("/agents/{name}", dependencies=[Depends(caller)], responses=answers(404))
async def agent(name: str, runtime: RuntimeDep) -> Any:
    bundle = runtime.bundle
    if name not in bundle.agents:
        raise UnknownAgentError(name, list(bundle.agents))
    return _agent_json(bundle.agents[name])


@router.get("/agents/{name}/surface", responses=answers(403, 404))
async def surface(name: str, request: Request, who: CallerDep, runtime: RuntimeDep) -> Any:
    params = request.query_params
    context = {k.removeprefix("context."): v for k, v in params.items() if k.startswith("context.")}
    return runtime.inspect(name, claims=_claims(who, params), context=context)


def _claims(who: Caller, params: Mapping[str, str]) -> dict[str, str]:
    """The caller's claims, and for an operator the `claim.K=V` it asks to see with."""
    asked = {k.removeprefix("claim."): v for k, v in params.items() if k.startswith("claim.")}
    if asked and not who.operator:
        raise ApiError(403, "forbidden", "only an operator may pass claim.K=V")
    return {**who.claims, **asked}


def _agent_json(agent: AgentDefinition) -> dict[str, Any]:
    return {
        "name": agent.name,
        "display_name": agent.display_name,
        "description": agent.description,
        "summary": agent.summary,
        "role": agent.role,
        "default": agent.is_default,
    }


__all__ = ["router"]
