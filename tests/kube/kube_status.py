"""`metav1.Status` failure bodies shaped exactly like kube-apiserver's (k8s.io/apimachinery/pkg/api/errors).

Every helper returns an `ApiError` carrying the HTTP code and the Status body; the HTTP layer serialises it
unchanged. Messages are built the way the Go constructors build them (`NewNotFound`, `NewConflict`,
`NewInvalid`, ...), so a client comparing texts or reasons sees what a real server sends. Field errors
(`FieldError`) render like `field.Error.Error()` / `ErrorBody()`.

Invariant: a Status always has `kind: Status`, `apiVersion: v1`, `metadata: {}`, `status: Failure`, `message`,
`reason` (except for a bare 500 wrapper, which real servers also give a reason) and `code`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# field.ErrorType -> the cause reason (metav1.CauseType) and the text ErrorBody() starts with.
FIELD_ERROR_TYPES = {
    "required": ("FieldValueRequired", "Required value"),
    "invalid": ("FieldValueInvalid", "Invalid value"),
    "unsupported": ("FieldValueNotSupported", "Unsupported value"),
    "forbidden": ("FieldValueForbidden", "Forbidden"),
    "duplicate": ("FieldValueDuplicate", "Duplicate value"),
}


class ApiError(Exception):
    """An API failure: `code` is the HTTP status, `body` the metav1.Status, `headers` extra response headers."""

    def __init__(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = headers or {}


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a failure Status in the field order the real server writes."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    # StatusDetails omits empty fields (omitempty), so the core group never shows "group": "".
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """`NewNotFound`: `pods "x" not found`."""
    message = f'{_qualified(resource, group)} "{name}" not found'
    return ApiError(404, status_body(404, "NotFound", message, _details(name, group, resource)))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """`NewAlreadyExists`: `pods "x" already exists`."""
    message = f'{_qualified(resource, group)} "{name}" already exists'
    return ApiError(409, status_body(409, "AlreadyExists", message, _details(name, group, resource)))


def conflict(resource: str, name: str, cause: str, group: str = "") -> ApiError:
    """`NewConflict`: `Operation cannot be fulfilled on pods "x": <cause>`.

    Delete preconditions pass the Kind ("Pod") as the resource, as rest.BeforeDelete does.
    """
    message = f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {cause}'
    return ApiError(409, status_body(409, "Conflict", message, _details(name, group, resource)))


MODIFIED_CONFLICT = "the object has been modified; please apply your changes to the latest version and try again"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One `field.Error`: kind is a FIELD_ERROR_TYPES key; value is shown for invalid/unsupported values."""

    kind: str
    field: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    def body(self) -> str:
        """`ErrorBody()`: the text after `<field>: `."""
        text = FIELD_ERROR_TYPES[self.kind][1]
        if self.kind in ("invalid", "unsupported", "duplicate"):
            text += f": {_go_value(self.value)}"
        if self.kind == "unsupported" and self.supported:
            text += ": supported values: " + ", ".join(f'"{v}"' for v in self.supported)
        if self.detail:
            text += f": {self.detail}"
        return text

    def error(self) -> str:
        return f"{self.field}: {self.body()}"


def _go_value(value: Any) -> str:
    # field.Error prints strings quoted (%q) and other values with %#v-ish text.
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def invalid(kind: str, name: str, errors: list[FieldError], group: str = "") -> ApiError:
    """`NewInvalid`: `Pod "x" is invalid: [a: Required value, b: ...]` with one cause per field error."""
    aggregate = errors[0].error() if len(errors) == 1 else "[" + ", ".join(e.error() for e in errors) + "]"
    message = f'{_qualified(kind, group)} "{name}" is invalid: {aggregate}'
    details = _details(name, group, kind)
    details["causes"] = [
        {"reason": FIELD_ERROR_TYPES[e.kind][0], "message": e.body(), "field": e.field} for e in errors
    ]
    return ApiError(422, status_body(422, "Invalid", message, details))


def bad_request(message: str) -> ApiError:
    """`NewBadRequest`: 400 with no details."""
    return ApiError(400, status_body(400, "BadRequest", message))


def unprocessable_patch(message: str) -> ApiError:
    """A JSON patch that cannot be applied: `NewGenericServerResponse(422, ...)` as the patch handler builds it."""
    details = {"causes": [{"reason": "UnexpectedServerResponse", "message": message}]}
    body = status_body(422, "Invalid", "the server rejected our request due to an error in our request", details)
    return ApiError(422, body)


def expired(message: str) -> ApiError:
    """`NewResourceExpired`: 410 Gone with reason Expired and no details."""
    return ApiError(410, status_body(410, "Expired", message))


def too_many_requests(retry_after_s: int) -> ApiError:
    """The API Priority and Fairness rejection (`tooManyRequests` in the filters package)."""
    body = status_body(
        429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": retry_after_s}
    )
    return ApiError(429, body, {"Retry-After": str(retry_after_s)})


def internal_error(cause: str) -> ApiError:
    """`NewInternalError`: `Internal error occurred: <cause>`."""
    body = status_body(500, "InternalError", f"Internal error occurred: {cause}", {"causes": [{"message": cause}]})
    return ApiError(500, body)


def timeout(message: str, retry_after_s: int = 0) -> ApiError:
    """`NewTimeoutError` (504): used for a request held past the server's request timeout."""
    details: dict[str, Any] = {}
    if retry_after_s:
        details["retryAfterSeconds"] = retry_after_s
    return ApiError(504, status_body(504, "Timeout", f"Timeout: {message}", details))


def unauthorized() -> ApiError:
    """What the authentication filter answers when no authenticator accepted the request."""
    return ApiError(401, status_body(401, "Unauthorized", "Unauthorized"))


def method_not_allowed() -> ApiError:
    """A verb the path does not serve: what the real REST handler's router answers (405, no details)."""
    message = "the server does not allow this method on the requested resource"
    return ApiError(405, status_body(405, "MethodNotAllowed", message, {}))


def not_found_path() -> ApiError:
    """An unknown URL: the real server's `404 page not found` Status from the not-found handler."""
    return ApiError(404, status_body(404, "NotFound", "the server could not find the requested resource", {}))


def unsupported_media_type(accepted: tuple[str, ...]) -> ApiError:
    """`NewUnsupportedMediaTypeError` (415) naming the media types the endpoint accepts."""
    message = "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted)
    return ApiError(415, status_body(415, "UnsupportedMediaType", message))


def not_acceptable() -> ApiError:
    """`NewNotAcceptableError` (406) for an Accept header naming no format this server writes."""
    message = "only the following media types are accepted: application/json"
    return ApiError(406, status_body(406, "NotAcceptable", message))
