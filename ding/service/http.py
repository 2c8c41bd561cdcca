"""The run's HTTP endpoints on ``ding.interaction``'s ``HttpService`` (Flask served by a werkzeug server
object in a background thread): ``/run/*`` (control), ``/metrics``, ``/healthz``, ``/weights/*``.

JSON answers use the interaction layer's envelope ``{"success", "code", "message", "data"}``;
``/metrics`` is Prometheus text and ``/weights/current`` raw safetensors bytes. Control requests
(``POST /run/*``) need the run's token (``Authorization: Bearer TOKEN`` or ``X-Ding-Token: TOKEN``):
a missing token gets 401, a wrong one 403. Read-only endpoints need none.

Any process can serve any subset: ``ServiceServer(control=..., metrics=..., weights=...)`` mounts the
routes of the parts it is given (e.g. a coordinator passes only its ``RunControl``).
"""

from __future__ import annotations

import hmac
import json
import math
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import Any, NoReturn, TypeVar

from flask import Flask, Response, request

from ding.interaction.base.common import connectable_host, random_token
from ding.interaction.base.envelope import ResponsibleException, failure_response, parse_json_object, success_response
from ding.interaction.base.limits import HttpLimits
from ding.interaction.base.server import HttpService, Route, build_app
from ding.utils.tls import TlsSettings
from ding.utils.weights_http import CONTENT_TYPE, HEADER_SHA256, HEADER_VERSION, etag_matches
from ding.utils.weights_signing import HEADER_RUN_ID, HEADER_SIGNATURE

from .metrics import ServiceMetrics
from .run_control import RunControl, RunStateError, TuneError
from .weights import WeightsStore
from .weights_stream import WeightsStreams

_Part = TypeVar('_Part')

# How long a weights request waits for the loop to publish the weights of its latest iteration.
WEIGHTS_REFRESH_SECONDS = 2.0
# Longest a request may ask to wait for the loop (pause drained, tune applied, final checkpoint written).
MAX_WAIT_SECONDS = 120.0
DEFAULT_WAIT_SECONDS = 10.0
# GET /weights/stream: how many subscribers at once, and how often an idle stream sends a keep-alive comment
# (which is also how often a stream notices that the server stops).
MAX_WEIGHTS_SUBSCRIBERS = 64
STREAM_KEEPALIVE_SECONDS = 15.0


class ServiceErrorCode(IntEnum):
    """Codes in the ``code`` field of the run service's answers."""

    SUCCESS = 0
    SYSTEM_SHUTTING_DOWN = 101
    REQUEST_INVALID = 102
    ROUTE_NOT_FOUND = 103
    METHOD_NOT_ALLOWED = 104
    UNKNOWN_ERROR = 199
    TOKEN_NOT_GIVEN = 301
    TOKEN_NOT_MATCH = 302
    RUN_STATE_CONFLICT = 401  # e.g. pausing a run that is terminating
    TUNE_UNKNOWN_KEY = 501
    TUNE_WRONG_TYPE = 502
    TUNE_OUT_OF_RANGE = 503
    TUNE_NOT_SUPPORTED = 504
    TUNE_INVALID = 505
    WEIGHTS_NOT_PUBLISHED = 601
    WEIGHTS_STREAM_FULL = 602
    UNHEALTHY = 701


_TUNE_CODES = {
    'unknown_key': (ServiceErrorCode.TUNE_UNKNOWN_KEY, 400),
    'wrong_type': (ServiceErrorCode.TUNE_WRONG_TYPE, 400),
    'out_of_range': (ServiceErrorCode.TUNE_OUT_OF_RANGE, 422),
    'not_supported': (ServiceErrorCode.TUNE_NOT_SUPPORTED, 400),
    'invalid': (ServiceErrorCode.TUNE_INVALID, 400),
}


def _refuse(code: ServiceErrorCode, status: int, message: str, data: dict[str, Any] | None = None) -> NoReturn:
    raise ResponsibleException(code, message, data, status_code=status)


def _json_body() -> dict[str, Any]:
    """The request body as a JSON object (empty body: ``{}``), bounded in depth; 400 otherwise. Only JSON.
    Its size was checked from Content-Length before this reads it (``build_app``)."""
    return parse_json_object(request.get_data(cache=True), ServiceErrorCode.REQUEST_INVALID, allow_empty=True)


def _wait_seconds(body: dict[str, Any]) -> float:
    wait = body.get('wait', DEFAULT_WAIT_SECONDS)
    if (
        isinstance(wait, bool)
        or not isinstance(wait, (int, float))
        or math.isnan(wait)
        or not 0 <= wait <= MAX_WAIT_SECONDS
    ):
        _refuse(
            ServiceErrorCode.REQUEST_INVALID,
            400,
            f"field 'wait' must be a number of seconds in [0, {MAX_WAIT_SECONDS:g}], got {wait!r}",
        )
    return float(wait)


class ServiceServer(HttpService):
    """Serves a run's control, metrics, health and weights. ``start()`` returns once it listens;
    ``port`` is then the real one (``port=0`` lets the OS pick). Binds 127.0.0.1 unless told otherwise."""

    _role = 'run-service'
    _codes = ServiceErrorCode

    def __init__(
        self,
        host: str = '127.0.0.1',
        port: int = 0,
        token: str | None = None,
        control: RunControl | None = None,
        metrics: ServiceMetrics | None = None,
        weights: WeightsStore | None = None,
        info: dict[str, Any] | None = None,
        limits: HttpLimits | None = None,
        tls: TlsSettings | None = None,
        max_subscribers: int = MAX_WEIGHTS_SUBSCRIBERS,
        keepalive_seconds: float = STREAM_KEEPALIVE_SECONDS,
        stream_token: str | None = None,
    ) -> None:
        super().__init__(host, port, limits=limits, tls=tls)
        if control is not None and not token:
            raise ValueError('ServiceServer: a token is required when run control is served')
        self._token = token or ''
        self.control = control
        self.metrics = metrics
        self.weights = weights
        self.info = dict(info or {})
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._stream_token = stream_token  # also opens /weights/stream (weights_stream_token of the run secret)
        self.streams = WeightsStreams(weights, max_subscribers, keepalive_seconds) if weights is not None else None

    # ---- app -------------------------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        # JSON routes, answered through the interaction layer's envelope.
        routes: list[Route] = [('/ping', ['GET'], self._api_ping)]
        if self.control is not None:
            routes += [
                ('/run/status', ['GET'], self._api_status),
                ('/run/pause', ['POST'], self._api_pause),
                ('/run/resume', ['POST'], self._api_resume),
                ('/run/tune', ['POST'], self._api_tune),
                ('/run/terminate', ['POST'], self._api_terminate),
            ]
        if self.weights is not None:
            routes.append(('/weights/meta', ['GET'], self._api_weights_meta))
        return routes

    def _build_app(self) -> Flask:
        # Every route is a control route: bodies are bounded by limits.control_body_bytes.
        app = build_app(
            __name__,
            [(rule, methods, self._counted(view)) for rule, methods, view in self._routes()],
            self._codes,
            limits=self.limits,
        )
        # Routes whose answers are not JSON envelopes (or carry a status the envelope views cannot set).
        raw = [('/healthz', self._raw_healthz)]
        if self.metrics is not None:
            raw.append(('/metrics', self._raw_metrics))
        if self.weights is not None:
            raw.append(('/weights/current', self._raw_weights_current))
            raw.append(('/weights/stream', self._raw_weights_stream))
        for rule, view in raw:
            app.add_url_rule(
                rule, endpoint=rule, view_func=self._counted(view), methods=['GET'], provide_automatic_options=False
            )
        return app

    def close(self, drain_seconds: float = 2.0) -> None:
        """Let requests being answered finish (up to ``drain_seconds``), then stop serving."""
        if self.streams is not None:
            self.streams.end()
        with self._inflight_cond:
            self._inflight_cond.wait_for(lambda: self._inflight == 0, timeout=drain_seconds)
        super().close()

    @property
    def subscribers(self) -> int:
        """Open ``GET /weights/stream`` connections."""
        return self.streams.subscribers if self.streams is not None else 0

    def _counted(self, view: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> Any:
            with self._inflight_cond:
                self._inflight += 1
            try:
                return view()
            finally:
                with self._inflight_cond:
                    self._inflight -= 1
                    self._inflight_cond.notify_all()

        return counted

    @property
    def address(self) -> str:
        """``host:port`` to reach this server from this machine."""
        host = connectable_host(self._host)
        return f'[{host}]:{self.port}' if ':' in host else f'{host}:{self.port}'

    @property
    def url(self) -> str:
        return ('https://' if self.tls is not None else 'http://') + self.address

    @property
    def token(self) -> str:
        """The token control requests must carry."""
        return self._token

    # ---- auth ------------------------------------------------------------------------------------------
    def _check_run_token(self, also: str | None = None) -> None:
        """The request carries the run's token (or ``also``, another token this route accepts); 401 / 403."""
        given = request.headers.get('X-Ding-Token')
        auth = request.headers.get('Authorization', '')
        if not given and auth.lower().startswith('bearer '):
            given = auth[7:].strip()
        if given and also and hmac.compare_digest(given.encode(), also.encode()):
            return
        if not given:
            _refuse(
                ServiceErrorCode.TOKEN_NOT_GIVEN,
                401,
                "this endpoint needs the run's token: header 'Authorization: Bearer TOKEN' "
                '(the token is in ./{exp_name}/run.json)',
            )
        if not hmac.compare_digest(given.encode(), self._token.encode()):
            if self.control is not None:
                self.control.record_event('auth_failed', path=request.path)
            _refuse(ServiceErrorCode.TOKEN_NOT_MATCH, 403, "token does not match this run's token")

    @staticmethod
    def _mounted(part: _Part | None) -> _Part:
        """A part whose routes are being served; routes are mounted only for the parts given."""
        if part is None:
            raise RuntimeError('run service: a route was served for a part this server was not given')
        return part

    # ---- /run/* ----------------------------------------------------------------------------------------
    def _api_status(self) -> dict[str, Any]:
        data = self._mounted(self.control).status()
        data.update(self.info)
        return success_response(data)

    def _api_pause(self) -> dict[str, Any]:
        self._check_run_token()
        wait = _wait_seconds(_json_body())
        try:
            data = self._mounted(self.control).request_pause(wait=wait)
        except RunStateError as err:
            _refuse(ServiceErrorCode.RUN_STATE_CONFLICT, 409, err.message, {'state': err.state})
        message = 'Paused.' if data['state'] == 'paused' else 'Pause requested; the in-flight iteration is draining.'
        return success_response(data, message)

    def _api_resume(self) -> dict[str, Any]:
        self._check_run_token()
        _json_body()
        try:
            data = self._mounted(self.control).request_resume()
        except RunStateError as err:
            _refuse(ServiceErrorCode.RUN_STATE_CONFLICT, 409, err.message, {'state': err.state})
        return success_response(data, 'Running.')

    def _api_tune(self) -> dict[str, Any]:
        self._check_run_token()
        body = _json_body()
        changes = body.get('changes', body.get('set'))
        if changes is None:
            _refuse(
                ServiceErrorCode.REQUEST_INVALID,
                400,
                f"tune body must hold 'changes': {{KEY: VALUE, ...}}; tunable keys: {self._mounted(self.control).tunable_keys}",
            )
        wait = _wait_seconds(body)
        try:
            data = self._mounted(self.control).request_tune(changes, wait=wait)
        except TuneError as err:
            code, status = _TUNE_CODES.get(err.reason, (ServiceErrorCode.TUNE_INVALID, 400))
            _refuse(
                code,
                status,
                err.message,
                {'key': err.key, 'bound': err.bound, 'reason': err.reason, 'problems': err.problems},
            )
        except RunStateError as err:
            _refuse(ServiceErrorCode.RUN_STATE_CONFLICT, 409, err.message, {'state': err.state})
        message = (
            'Applied.'
            if data.get('applied')
            else ('Accepted; it is applied before the next iteration.' if 'errors' not in data else 'Failed to apply.')
        )
        return success_response(data, message)

    def _api_terminate(self) -> dict[str, Any]:
        self._check_run_token()
        wait = _wait_seconds(_json_body())
        try:
            data = self._mounted(self.control).request_terminate(wait=wait)
        except RunStateError as err:
            _refuse(ServiceErrorCode.RUN_STATE_CONFLICT, 409, err.message, {'state': err.state})
        message = 'Terminated.' if data['state'] == 'terminated' else 'Terminate requested.'
        return success_response(data, message)

    # ---- /weights/* ------------------------------------------------------------------------------------
    def _api_weights_meta(self) -> dict[str, Any]:
        current = self._mounted(self.weights).fresh(WEIGHTS_REFRESH_SECONDS)
        if current is None:
            _refuse(ServiceErrorCode.WEIGHTS_NOT_PUBLISHED, 503, 'no weights have been published yet')
        return success_response(current.meta())

    def _raw_weights_current(self) -> Response:
        current = self._mounted(self.weights).fresh(WEIGHTS_REFRESH_SECONDS)
        if current is None:
            return _envelope(
                failure_response(ServiceErrorCode.WEIGHTS_NOT_PUBLISHED, 'no weights have been published yet'),
                503,
                {'Retry-After': '1'},
            )
        headers = {
            HEADER_VERSION: str(current.version),
            HEADER_SHA256: current.sha256,
            'ETag': current.etag,
            'Cache-Control': 'no-cache',
        }
        if current.run_id:
            headers[HEADER_RUN_ID] = current.run_id
        if current.signature is not None:
            headers[HEADER_SIGNATURE] = current.signature
        if etag_matches(request.headers.get('If-None-Match'), current.sha256):
            return Response(status=304, headers=headers)
        return Response(current.payload, status=200, headers=headers, mimetype=CONTENT_TYPE)

    def _raw_weights_stream(self) -> Response:
        """Server-sent events (``ding.service.weights_stream``), for the run's token or ``stream_token``; at
        most ``max_subscribers`` at once (429 past that)."""
        try:
            self._check_run_token(also=self._stream_token)
        except ResponsibleException as err:
            return _envelope(err.get_response(), err.status_code)
        streams = self._mounted(self.streams)
        if not streams.acquire():
            return _envelope(
                failure_response(
                    ServiceErrorCode.WEIGHTS_STREAM_FULL,
                    f'too many weights stream subscribers (at most {streams.max_subscribers}); poll /weights/meta',
                    {'max_subscribers': streams.max_subscribers},
                ),
                429,
                {'Retry-After': '5'},
            )
        return streams.response()

    # ---- /metrics, /healthz ----------------------------------------------------------------------------
    def _raw_metrics(self) -> Response:
        return Response(
            self._mounted(self.metrics).text(), status=200, content_type=self._mounted(self.metrics).content_type
        )

    def _raw_healthz(self) -> Response:
        if self.control is None:
            return _envelope(success_response({'status': 'ok', 'reason': 'serving'}, 'ok'), 200)
        healthy, body = self.control.health()
        if healthy:
            return _envelope(success_response(body, body['reason']), 200)
        return _envelope(failure_response(ServiceErrorCode.UNHEALTHY, body['reason'], body), 503)


def _envelope(envelope: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(envelope), status=status, mimetype='application/json', headers=headers)


def serve(
    control: RunControl | None = None,
    metrics: ServiceMetrics | None = None,
    weights: WeightsStore | None = None,
    host: str = '127.0.0.1',
    port: int = 0,
    token: str | None = None,
    info: dict[str, Any] | None = None,
) -> ServiceServer:
    """Start a ``ServiceServer`` for the given parts in this process and return it (``close()`` stops it).

    Control routes need ``token`` (one is generated when None; read it back from ``server.token``).
    """
    if control is not None and not token:
        token = random_token(16)
    server = ServiceServer(host, port, token, control, metrics, weights, info)
    server.start()
    return server


__all__ = ['ServiceServer', 'ServiceErrorCode', 'serve', 'MAX_WAIT_SECONDS', 'DEFAULT_WAIT_SECONDS']
