"""`/automations` and `/confirmations` (SPEC 23; docs/automations.md):

- `GET /automations`: each automation's trigger, next run, paused, last run (operator);
- `GET /automations/{name}/runs?limit=`: its runs, newest first (operator);
- `POST /automations/{name}/run`: a manual run now, 202 `{run_id, session_id}` (operator);
- `POST /automations/{name}/pause` and `/resume`: kept in the database (operator);
- `POST /automations/{name}/webhook`: a signed webhook starts a run, 202 (the signature
  is the credential: no `Authorization`);
- `GET /confirmations`: every pending confirmation, for an operator to answer with
  `POST /sessions/{id}/confirmations/{call_id}`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from runtime.automations import AutomationInfo, Automations, Refused, verified_payload
from runtime.automations.signing import MAX_BODY_BYTES, delivery_id
from runtime.server.dependencies import RuntimeDep, operator, served
from runtime.server.errors import ApiError, TextJSONResponse
from runtime.server.openapi import answers
from runtime.storage import MAX_QUERY_LIMIT, AutomationRunRecord

router = APIRouter()

Name = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
OPERATOR = [Depends(operator("manage automations"))]


async def automations_of(request: Request) -> Automations:
    found = served(request).automations
    if found is None:
        raise ApiError(503, "automations_off", "automations do not run in this server")
    return found


AutomationsDep = Annotated[Automations, Depends(automations_of)]


@router.get("/automations", dependencies=OPERATOR, responses=answers(403))
async def list_automations(automations: AutomationsDep) -> dict[str, Any]:
    """Every automation: trigger, schedule, next run, paused, last run, and the problems of
    a broken one (it does not run)."""
    return {"automations": [info_json(info) for info in await automations.listing()]}


@router.get("/automations/{name}/runs", dependencies=OPERATOR, responses=answers(403, 404))
async def list_runs(
    name: Name,
    automations: AutomationsDep,
    limit: Annotated[int, Query(ge=1, le=MAX_QUERY_LIMIT)] = 20,
) -> dict[str, Any]:
    """The automation's runs (and missed or skipped cron slots), newest first."""
    return {"runs": [run_json(run) for run in await automations.runs(name, limit)]}


@router.post(
    "/automations/{name}/run", dependencies=OPERATOR, status_code=202, responses=answers(403, 404)
)
async def run_now(name: Name, automations: AutomationsDep) -> dict[str, Any]:
    """Start a run now, whatever the trigger; follow it at `GET /sessions/{id}/events`."""
    return run_json(await automations.run_now(name))


@router.post("/automations/{name}/pause", dependencies=OPERATOR, responses=answers(403, 404))
async def pause(name: Name, automations: AutomationsDep) -> dict[str, Any]:
    """Stop firing its cron slots, on every server of the database, until resumed."""
    await automations.pause(name)
    return {"name": name, "paused": True}


@router.post("/automations/{name}/resume", dependencies=OPERATOR, responses=answers(403, 404))
async def resume(name: Name, automations: AutomationsDep) -> dict[str, Any]:
    await automations.resume(name)
    return {"name": name, "paused": False}


@router.post(
    "/automations/{name}/webhook",
    status_code=202,
    responses=answers(401, 404),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def webhook(name: Name, request: Request, automations: AutomationsDep) -> JSONResponse:
    """A signed webhook (`X-Amodal-Timestamp`, `X-Amodal-Signature`, optional
    `X-Amodal-Delivery`) starts a run with the JSON body as its `payload`. A bad or
    missing signature, a stale timestamp, a body over 64 KB or not JSON start nothing."""
    definition = automations.definitions().get(name)
    if definition is None or definition.webhook_secret is None:
        raise ApiError(404, "unknown_automation", f"no automation {name!r} takes webhooks")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
    body = await request.body()
    try:
        payload = verified_payload(definition.webhook_secret, request.headers, body, time.time())
        delivery = delivery_id(request.headers)
    except Refused as refused:
        raise ApiError(refused.status, refused.code, refused.message) from None
    record, started = await automations.run_webhook(name, payload, delivery)
    return TextJSONResponse({**run_json(record), "duplicate": not started}, status_code=202)


@router.get(
    "/confirmations",
    dependencies=[Depends(operator("list every pending confirmation"))],
    responses=answers(403),
)
async def confirmations(
    runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=MAX_QUERY_LIMIT)] = 100
) -> dict[str, Any]:
    """Every tool call waiting for a person's approval, oldest first (an automation's run
    leaves its `confirm` tools here); answer one with `POST
    /sessions/{session_id}/confirmations/{call_id}` `{"approve": bool}`."""
    pending = await runtime.pending_confirmations(limit=limit, operator=True)
    return {
        "confirmations": [
            {
                "session_id": p.session_id,
                "call_id": p.call_id,
                "agent": p.agent,
                "tool": p.tool,
                "arguments": p.arguments,
                "created_at": p.created_at.isoformat(),
            }
            for p in pending
        ]
    }


def info_json(info: AutomationInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "trigger": info.trigger,
        "agent": info.agent,
        "schedule": info.schedule,
        "timezone": info.timezone,
        "paused": info.paused,
        "next_run": info.next_run.isoformat() if info.next_run else None,
        "last_run": run_json(info.last_run) if info.last_run else None,
        "last_run_status": info.last_run.status if info.last_run else None,
        "consecutive_failures": info.failures,
        "errors": list(info.errors),
    }


def run_json(run: AutomationRunRecord) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "automation": run.automation,
        "trigger": run.trigger,
        "status": run.status,
        "slot": run.slot.isoformat() if run.slot else None,
        "session_id": run.session_id,
        "done_reason": run.done_reason,
        "reply": run.reply,
        "error": run.error,
        "created_at": run.created_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "deliveries": run.deliveries,
    }
