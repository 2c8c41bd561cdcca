"""HTTP client used by masters and slaves: JSON bodies, fixed headers, timeout and bounded retries."""

import http.client
import io
import json
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

from ..config import DEFAULT_REQUEST_RETRIES, DEFAULT_REQUEST_RETRY_WAITING, DEFAULT_REQUEST_TIMEOUT
from ..exception import get_values_from_response
from .common import format_http_address

# Code 101 means "shutting down" for masters and slaves alike: retrying such an answer is pointless.
_SHUTTING_DOWN_CODE = 101


def _response(status: int, content: bytes, headers: list[tuple[str, str]], reason: str, url: str) -> requests.Response:
    """A ``requests.Response`` of an answer read with ``http.client``, filled in through its public attributes as
    requests' own transport adapters do (the body is its ``raw`` stream)."""
    response = requests.Response()
    response.status_code = status
    response.raw = io.BytesIO(content)
    response.headers = CaseInsensitiveDict(headers)
    response.reason = reason
    response.url = url
    response.encoding = 'utf-8'
    return response


def _send(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    url: str,
) -> requests.Response:
    """One request on a fresh connection, errors as requests' exceptions (what callers catch): a failure to
    connect is a ``ConnectionError`` (``ConnectTimeout`` on timeout), a timeout waiting for the answer a
    ``ReadTimeout``, a connection broken after sending a ``ConnectionError``."""
    try:
        connection.connect()
    except TimeoutError as err:
        raise requests.ConnectTimeout(f'cannot connect to {url}: {err}') from None
    except OSError as err:
        raise requests.ConnectionError(f'cannot connect to {url}: {err}') from None
    try:
        connection.request(method, path, body=body, headers=headers)
        raw = connection.getresponse()
        content = raw.read()
        return _response(raw.status, content, raw.getheaders(), raw.reason, url)
    except TimeoutError as err:
        raise requests.ReadTimeout(f'no answer from {url} in time: {err}') from None
    except (OSError, http.client.HTTPException) as err:
        raise requests.ConnectionError(f'connection to {url} broken: {err!r}') from None
    finally:
        connection.close()


def _is_retryable(response: requests.Response) -> bool:
    return response.status_code >= 500 and get_values_from_response(response).code != _SHUTTING_DOWN_CODE


class HttpClient:
    """
    Sends JSON requests to one server and returns the ``data`` of its success envelope.

    A request is tried ``1 + retries`` times, waiting ``retry_waiting`` seconds in between, but only after a
    connection error or a 5xx answer; a 4xx answer (or a read timeout, when the server may already have acted)
    is final. Failed answers are raised as ``error_factory(response)`` (the per-code exception classes).
    Proxy settings from the environment are ignored: peers are addressed directly.

    With ``tls`` (a client context: ``TlsSettings.client_context()``) requests go over HTTPS, and only to a
    server whose certificate that context trusts for ``host``.

    Requests go out through ``http.client`` on a fresh connection each (the werkzeug servers close every
    connection after one answer, so there is nothing to keep alive): a third of the CPU time of a
    ``requests`` call, which matters to a learner that reports every few iterations.
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
        tls: ssl.SSLContext | None = None,
    ):
        self.host = host
        self.port = port
        self.base_url = format_http_address(host, port, tls is not None)
        self._headers = dict(headers)
        self._error_factory = error_factory
        self.retries = retries
        self.retry_waiting = retry_waiting
        self.timeout = timeout
        self._tls = tls

    def request(
        self,
        method: str,
        path: str,
        data: Mapping[str, Any] | None = None,
        *,
        retries: int | None = None,
        retry_waiting: float | None = None,
        timeout: float | None = None,
        abort: threading.Event | None = None,
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """
        Send ``data`` (JSON-serializable mapping, or None for no body) and return the answer's ``data`` dict.
        ``abort``: an event that, once set, stops further retries. ``idempotent``: the request may be repeated
        safely (heartbeat, ping), so read timeouts and broken answers are retried as well. Raises ``TypeError`` before sending when
        ``data`` is not JSON-serializable, ``requests.ConnectionError``/``Timeout`` when the server cannot be
        reached, or the error-code exception of a failed answer.
        """
        body = None if data is None else json.dumps(data).encode('utf-8')
        headers = dict(self._headers)
        if body is not None:
            headers['Content-Type'] = 'application/json'
        retries = self.retries if retries is None else retries
        retry_waiting = self.retry_waiting if retry_waiting is None else retry_waiting
        timeout = self.timeout if timeout is None else timeout
        url = self.base_url + path

        last_error: Exception | None = None
        for attempt in range(1 + max(retries, 0)):
            if attempt:
                if abort is not None:
                    if abort.wait(retry_waiting):
                        break
                else:
                    time.sleep(retry_waiting)
            connection = (
                http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._tls)
                if self._tls is not None
                else http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            )
            try:
                response = _send(connection, method, path, body, headers, url)
            except requests.ConnectionError as err:  # includes ConnectTimeout
                last_error = err
                continue
            except requests.RequestException as err:  # ReadTimeout etc.: the server may already have acted
                if not idempotent:
                    raise
                last_error = err
                continue
            if _is_retryable(response):
                last_error = self._failure(response, method, url)
                continue
            if not 200 <= response.status_code < 300:
                raise self._failure(response, method, url)
            values = get_values_from_response(response)
            if not values.success:
                raise self._failure(response, method, url)
            return values.data
        assert last_error is not None
        raise last_error

    def _failure(self, response: requests.Response, method: str, url: str) -> Exception:
        """The exception of a failed answer; it names the request (only failures pay for preparing one)."""
        response.request = requests.Request(method, url).prepare()
        return self._error_factory(response)

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.base_url})'
