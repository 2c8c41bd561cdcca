"""Client-side view of a failed request: the response envelope and the exception base class."""

import json
from typing import Any, NamedTuple

import requests


class ResponseValues(NamedTuple):
    """Fields of one answer: HTTP status plus the ``{"success", "code", "message", "data"}`` envelope."""

    status_code: int
    success: bool
    code: int | None
    message: str
    data: dict[str, Any]


def get_values_from_response(response: requests.Response) -> ResponseValues:
    """
    Read the envelope of ``response``. An answer that is not an envelope (a proxy error page, garbage)
    gives ``success=False, code=None`` and a message quoting the start of the body.
    """
    try:
        body = json.loads(response.content.decode('utf-8'))
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get('success'), bool) and isinstance(body.get('code'), int):
        data = body.get('data')
        message = body.get('message')
        return ResponseValues(
            response.status_code,
            body['success'],
            body['code'],
            message if isinstance(message, str) else '',
            data if isinstance(data, dict) else {},
        )
    snippet = response.content[:200].decode('utf-8', errors='replace')
    return ResponseValues(response.status_code, False, None, f'answer is not a JSON envelope: {snippet!r}', {})


class ResponseException(requests.HTTPError):
    """
    A request answered with an error. Subclasses of ``requests.HTTPError`` so that callers catching
    ``HTTPError`` (as DI-engine's coordinator does) see these too. Attributes: ``status_code``, ``success``,
    ``code``, ``message``, ``data`` and ``response``.
    """

    def __init__(self, response: requests.Response):
        values = get_values_from_response(response)
        self.status_code = values.status_code
        self.success = values.success
        self.code = values.code
        self.message = values.message
        self.data = values.data
        request = getattr(response, 'request', None)
        where = f'{request.method} {request.url}' if request is not None else response.url
        super().__init__(
            f'{type(self).__name__} (HTTP {values.status_code}, code {values.code}) from {where}: {values.message}',
            response=response,
        )


def _response_of(error: Any) -> requests.Response:
    if isinstance(error, requests.Response):
        return error
    response = getattr(error, 'response', None)
    if not isinstance(response, requests.Response):
        raise TypeError(f'expected a requests.Response or an HTTPError carrying one, got {error!r}')
    return response
