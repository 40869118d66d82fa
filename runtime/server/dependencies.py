"""What a route takes from its request, as FastAPI dependencies: the runtime it serves and
the caller its credential verifies (SPEC 12).

A route declares `who: CallerDep` to be called only with a verified credential (401
otherwise), `dependencies=[Depends(operator("..."))]` to be the operator's alone (403
otherwise), and `runtime: RuntimeDep` for the `Runtime` behind the app; `create_app`
puts what these read on `app.state` (`serve`). FastAPI runs them before the route and
before it validates the route's query and body, so a request without a valid
credential is refused the same way whatever else is wrong with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Request

from runtime.api import Runtime
from runtime.automations import Automations
from runtime.observe.metrics import Metrics
from runtime.server.auth import Authenticator
from runtime.server.errors import ApiError
from runtime.surface.caller import Caller


@dataclass(frozen=True)
class Served:
    """What the routes of one app serve."""

    runtime: Runtime
    auth: Authenticator
    metrics: Metrics
    automations: Automations | None = None
    """The automations service (`amodal serve` runs one in every process); None: off."""


def serve(app: FastAPI, served: Served) -> None:
    """Make `served` what the dependencies of `app`'s routes give."""
    app.state.served = served


def served(request: Request) -> Served:
    found = request.app.state.served
    assert isinstance(found, Served), "create_app sets app.state.served"
    return found


# Dependencies are `async def`: FastAPI would run a plain function in a worker thread.


async def runtime_of(request: Request) -> Runtime:
    return served(request).runtime


async def metrics_of(request: Request) -> Metrics:
    return served(request).metrics


async def caller(request: Request, authorization: Annotated[str | None, Header()] = None) -> Caller:
    """The caller the `Authorization` header verifies (`AuthError`, a 401, when it does not)."""
    return served(request).auth.caller(authorization)


RuntimeDep = Annotated[Runtime, Depends(runtime_of)]
MetricsDep = Annotated[Metrics, Depends(metrics_of)]
CallerDep = Annotated[Caller, Depends(caller)]


def operator(action: str) -> Callable[[Caller], Awaitable[Caller]]:
    """A dependency: the caller, who must be the operator (else 403 "only an operator may
    `action`")."""

    async def the_operator(who: CallerDep) -> Caller:
        if not who.operator:
            raise ApiError(403, "forbidden", f"only an operator may {action}")
        return who

    return the_operator


__all__ = [
    "CallerDep",
    "MetricsDep",
    "RuntimeDep",
    "Served",
    "caller",
    "operator",
    "serve",
]
