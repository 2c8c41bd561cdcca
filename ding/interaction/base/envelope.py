"""
Server side of the response envelope ``{"success": bool, "code": int, "message": str, "data": {...}}``:
building answers, refusing requests with an error code, and reading JSON request bodies strictly.
"""

import json
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from ding.utils.jsonable import exceeds_depth

from .. import config
from ..exception import http_status_of


def success_response(data: Mapping[str, Any] | None = None, message: str = 'Success.') -> dict[str, Any]:
    """Envelope of a successful answer."""
    return {'success': True, 'code': 0, 'message': message, 'data': dict(data or {})}


def failure_response(code: IntEnum, message: str, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Envelope of a refused or failed request."""
    return {'success': False, 'code': int(code), 'message': message, 'data': dict(data or {})}


class ResponsibleException(Exception):
    """
    An exception that is also an answer: raised inside a request handler (or a slave hook), it is turned
    into a failure envelope with its error ``code`` and an HTTP status derived from the code.
    """

    def __init__(
        self, code: IntEnum, message: str, data: Mapping[str, Any] | None = None, status_code: int | None = None
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = dict(data or {})
        self.status_code = status_code if status_code is not None else http_status_of(code)

    def get_response(self) -> dict[str, Any]:
        """The failure envelope of this exception."""
        return failure_response(self.code, self.message, self.data)


def parse_json_object(
    raw: bytes, invalid_code: IntEnum, allow_empty: bool = False, max_depth: int | None = None
) -> dict[str, Any]:
    """
    Decode a request body that must be a JSON object (never anything else: no pickles, no arrays) nested at
    most ``max_depth`` levels (default ``config.MAX_JSON_DEPTH``). ``allow_empty`` accepts an empty body as
    ``{}``. Raises ``ResponsibleException(invalid_code)`` answered with HTTP 400.
    """
    if not raw:
        if allow_empty:
            return {}
        raise ResponsibleException(invalid_code, 'Request body is empty; a JSON object is required.', status_code=400)
    limit = config.MAX_JSON_DEPTH if max_depth is None else max_depth
    too_deep = f'Request body is nested deeper than {limit} levels.'
    try:
        body = json.loads(raw.decode('utf-8'))
    except RecursionError:  # deeper than the decoder can go: certainly deeper than the limit
        raise ResponsibleException(invalid_code, too_deep, status_code=400) from None
    except (UnicodeDecodeError, ValueError) as err:
        raise ResponsibleException(invalid_code, f'Request body is not valid JSON: {err}.', status_code=400) from None
    if not isinstance(body, dict):
        raise ResponsibleException(
            invalid_code, f'Request body must be a JSON object, got {type(body).__name__}.', status_code=400
        )
    if exceeds_depth(body, limit):
        raise ResponsibleException(invalid_code, too_deep, status_code=400)
    return body


def get_object_field(body: Mapping[str, Any], key: str, invalid_code: IntEnum, required: bool = True) -> dict[str, Any]:
    """``body[key]`` checked to be a JSON object (``{}`` when absent and not required)."""
    if key not in body:
        if required:
            raise ResponsibleException(invalid_code, f'Field {key!r} is missing from the request body.')
        return {}
    value = body[key]
    if not isinstance(value, dict):
        raise ResponsibleException(invalid_code, f'Field {key!r} must be a JSON object, got {type(value).__name__}.')
    return value


def get_string_field(body: Mapping[str, Any], key: str, invalid_code: IntEnum, max_length: int = 256) -> str:
    """``body[key]`` checked to be a non-empty string of at most ``max_length`` characters."""
    value = body.get(key)
    if not isinstance(value, str) or not value or len(value) > max_length:
        raise ResponsibleException(
            invalid_code, f'Field {key!r} must be a non-empty string of at most {max_length} characters.'
        )
    return value


def check_json_serializable(value: Any, what: str, error_code: IntEnum) -> None:
    """Raise ``ResponsibleException(error_code)`` naming ``what`` when ``value`` cannot be sent as JSON."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as err:
        raise ResponsibleException(error_code, f'{what} is not JSON-serializable: {err}.') from None
