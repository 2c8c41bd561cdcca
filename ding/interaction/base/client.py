"""HTTP client used by masters and slaves: JSON bodies, fixed headers, timeout and bounded retries."""
import json
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional

import requests

from ..config import DEFAULT_REQUEST_RETRIES, DEFAULT_REQUEST_RETRY_WAITING, DEFAULT_REQUEST_TIMEOUT
from ..exception import get_values_from_response
from .common import format_http_address

# Code 101 means "shutting down" for masters and slaves alike: retrying such an answer is pointless.
_SHUTTING_DOWN_CODE = 101


def _is_retryable(response: requests.Response) -> bool:
    return response.status_code >= 500 and get_values_from_response(response).code != _SHUTTING_DOWN_CODE


class HttpClient:
    """
    Sends JSON requests to one server and returns the ``data`` of its success envelope.

    A request is tried ``1 + retries`` times, waiting ``retry_waiting`` seconds in between, but only after a
    connection error or a 5xx answer; a 4xx answer (or a read timeout, when the server may already have acted)
    is final. Failed answers are raised as ``error_factory(response)`` (the per-code exception classes).
    Proxy settings from the environment are ignored: peers are addressed directly.
    """

    def __init__(
        self,
        host: str,
        port: int,
        headers: Mapping[str, str],
        error_factory: Callable[[requests.Response], Exception],
        retries: int = DEFAULT_REQUEST_RETRIES,
        retry_waiting: float = DEFAULT_REQUEST_RETRY_WAITING,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        https: bool = False,
    ):
        self.host = host
        self.port = port
        self.base_url = format_http_address(host, port, https)
        self._headers = dict(headers)
        self._error_factory = error_factory
        self.retries = retries
        self.retry_waiting = retry_waiting
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        data: Optional[Mapping[str, Any]] = None,
        *,
        retries: Optional[int] = None,
        retry_waiting: Optional[float] = None,
        timeout: Optional[float] = None,
        abort: Optional[threading.Event] = None,
        idempotent: bool = False,
    ) -> Dict[str, Any]:
        """
        Send ``data`` (JSON-serializable mapping, or None for no body) and return the answer's ``data`` dict.
        ``abort``: an event that, once set, stops further retries. ``idempotent``: the request may be repeated
        safely (heartbeat, ping), so read timeouts and broken answers are retried as well. Raises ``TypeError`` before sending when
        ``data`` is not JSON-serializable, ``requests.ConnectionError``/``Timeout`` when the server cannot be
        reached, or the error-code exception of a failed answer.
        """
        body = None if data is None else json.dumps(data)
        headers = dict(self._headers)
        if body is not None:
            headers['Content-Type'] = 'application/json'
        retries = self.retries if retries is None else retries
        retry_waiting = self.retry_waiting if retry_waiting is None else retry_waiting
        timeout = self.timeout if timeout is None else timeout
        url = self.base_url + path

        last_error: Optional[Exception] = None
        for attempt in range(1 + max(retries, 0)):
            if attempt:
                if abort is not None:
                    if abort.wait(retry_waiting):
                        break
                else:
                    time.sleep(retry_waiting)
            try:
                with requests.Session() as session:
                    session.trust_env = False
                    response = session.request(method, url, data=body, headers=headers, timeout=timeout)
            except requests.ConnectionError as err:  # includes ConnectTimeout
                last_error = err
                continue
            except requests.RequestException as err:  # ReadTimeout etc.: the server may already have acted
                if not idempotent:
                    raise
                last_error = err
                continue
            if _is_retryable(response):
                last_error = self._error_factory(response)
                continue
            if not 200 <= response.status_code < 300:
                raise self._error_factory(response)
            values = get_values_from_response(response)
            if not values.success:
                raise self._error_factory(response)
            return values.data
        assert last_error is not None
        raise last_error

    def __repr__(self) -> str:
        return '{}({})'.format(type(self).__name__, self.base_url)
