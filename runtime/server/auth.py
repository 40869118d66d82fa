"""Who is calling: claims from verified credentials only (SPEC 12).

Three kinds of credential, all as `Authorization: Bearer <token>`:
- the operator token (`AMODAL_OPERATOR_TOKEN`): an operator, no claims needed;
- an API key from `auth.apiKeys` in amodal.json: the fixed claims written there;
- a JWT verified against `auth.jwt` (key, algorithms, audience, issuer): its claims,
  with non-string values JSON-encoded.
With no auth configured at all, every caller is the operator, and the server
refuses to listen anywhere but loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Mapping

import jwt

from runtime.exceptions import AuthError, ConfigurationError
from runtime.repo.formats import Auth
from runtime.surface.caller import Caller

OPERATOR_TOKEN_ENV = "AMODAL_OPERATOR_TOKEN"


class Authenticator:
    def __init__(self, auth: Auth, environ: Mapping[str, str]) -> None:
        self._auth = auth
        self._operator_token = environ.get(OPERATOR_TOKEN_ENV) or None

    @property
    def configured(self) -> bool:
        """True when any credential is required; without one, only loopback is safe."""
        return bool(self._operator_token or self._auth.jwt or self._auth.api_keys)

    def caller(self, authorization: str | None, *, human_present: bool = True) -> Caller:
        if not self.configured:
            return Caller(operator=True, human_present=human_present)
        token = _bearer(authorization)
        if self._operator_token and _same(token, self._operator_token):
            return Caller(operator=True, human_present=human_present)
        for api_key in self._auth.api_keys:
            if _same(token, api_key.key.get_secret_value()):
                return Caller(claims=dict(api_key.claims), human_present=human_present)
        if self._auth.jwt is not None:
            return Caller(claims=self._jwt_claims(token), human_present=human_present)
        raise AuthError("invalid credentials")

    def _jwt_claims(self, token: str) -> dict[str, str]:
        settings = self._auth.jwt
        assert settings is not None
        try:
            claims = jwt.decode(
                token,
                settings.key.get_secret_value(),
                algorithms=list(settings.algorithms),
                audience=settings.audience,
                issuer=settings.issuer,
                options={"require": ["exp"]},  # a token that never expires is not accepted
            )
        except jwt.PyJWTError as error:
            raise AuthError(f"invalid token: {error}") from error
        return {
            key: value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            for key, value in claims.items()
        }


def _same(token: str, secret: str) -> bool:
    # Compared as bytes: compare_digest refuses non-ASCII str, and a header may carry any
    # byte (Starlette decodes headers as latin-1), which must be a 401, not a crash.
    return hmac.compare_digest(token.encode(), secret.encode())


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("missing credentials: send Authorization: Bearer <token>")
    return token.strip()


def check_binding(host: str, auth: Authenticator) -> None:
    """Refuse to listen beyond loopback when no credential is required."""
    if auth.configured:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigurationError(
            f"refusing to listen on {host} without authentication: every caller would be the "
            "operator. Set AMODAL_OPERATOR_TOKEN or `auth` in amodal.json, or bind to 127.0.0.1."
        )
