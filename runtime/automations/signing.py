"""Signed webhooks, both ways (SPEC 23): what a caller must send for a run to start, and
how this runtime signs what it delivers.

A signature is `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` with the automation's
secret, sent as `X-Amodal-Signature` next to `X-Amodal-Timestamp` (Unix seconds). The
timestamp is inside the signed text, so an old request cannot be replayed with a fresh
one, and it must be within `WINDOW_SECONDS` of now.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WINDOW_SECONDS = 300
MAX_BODY_BYTES = 64 * 1024
SIGNATURE_HEADER = "X-Amodal-Signature"
TIMESTAMP_HEADER = "X-Amodal-Timestamp"
DELIVERY_HEADER = "X-Amodal-Delivery"
MAX_DELIVERY_ID = 200


@dataclass(frozen=True, slots=True)
class Refused(Exception):
    """Why an incoming webhook starts nothing: an HTTP status, a code and a message."""

    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Amodal-Signature` value of `body` sent at `timestamp`."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(secret: str | None, body: bytes, now: float) -> dict[str, str]:
    """The headers of a delivery: its timestamp, and its signature when there is a secret."""
    timestamp = str(int(now))
    headers = {TIMESTAMP_HEADER: timestamp, "Content-Type": "application/json"}
    if secret is not None:
        headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return headers


def verified_payload(
    secret: str, headers: Mapping[str, str], body: bytes, now: float
) -> dict[str, Any]:
    """The JSON object of a signed request, or `Refused`: checked in an order that reads
    nothing unverified (size, then signature and time, then JSON)."""
    if len(body) > MAX_BODY_BYTES:
        raise Refused(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
    timestamp = headers.get(TIMESTAMP_HEADER.lower()) or headers.get(TIMESTAMP_HEADER)
    sent = headers.get(SIGNATURE_HEADER.lower()) or headers.get(SIGNATURE_HEADER)
    if not timestamp or not sent:
        raise Refused(
            401,
            "signature_missing",
            f"send {TIMESTAMP_HEADER} (Unix seconds) and {SIGNATURE_HEADER}: sha256=<hex HMAC>",
        )
    if not hmac.compare_digest(signature(secret, timestamp, body), sent.strip()):
        raise Refused(401, "bad_signature", "the signature does not match the body and timestamp")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise Refused(401, "bad_timestamp", f"{TIMESTAMP_HEADER} is Unix seconds") from None
    if abs(now - sent_at) > WINDOW_SECONDS:
        raise Refused(
            401, "stale_timestamp", f"the timestamp is more than {WINDOW_SECONDS} s from now"
        )
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Refused(400, "not_json", "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise Refused(400, "not_json", "the body is a JSON value, not an object")
    return payload


def delivery_id(headers: Mapping[str, str]) -> str | None:
    """The caller's `X-Amodal-Delivery` id (the same id starts one run), or `Refused`."""
    value = headers.get(DELIVERY_HEADER.lower()) or headers.get(DELIVERY_HEADER)
    if value is None:
        return None
    if not value or len(value) > MAX_DELIVERY_ID or not value.isprintable():
        raise Refused(
            400, "bad_delivery_id", f"{DELIVERY_HEADER} is 1 to {MAX_DELIVERY_ID} printable chars"
        )
    return value
