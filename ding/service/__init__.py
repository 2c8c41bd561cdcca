"""The run service: run control (pause / resume / tune / terminate), Prometheus metrics, health, policy
weights over HTTP and structured JSON event logs, for the serial pipeline and as parts for the parallel one.

Configured by the top-level ``service`` section of a config (off by default: the HTTP server imports
flask and prometheus-client, about half a second)::

    service=dict(
        enable=False,                # serve /run/*, /metrics, /healthz, /weights/* over HTTP
        host='127.0.0.1',            # bind address (control needs the token in any case)
        port=0,                      # 0: a free port, written to ./{exp_name}/run.json
        token=None,                  # None: a random token per run (in run.json, mode 0600)
        json_log=False,              # one JSON event per line in ./{exp_name}/log/events.jsonl
        json_log_every=100,          # a 'train' event every N iterations (0: none)
        health_stuck_seconds=300.0,  # /healthz answers 503 after this long without an iteration
        weights_freq=100,            # publish weights every N iterations (0: never periodically); also at
                                     # start, pause and end, and on demand when /weights/* is read
        tracing=dict(                # OpenTelemetry spans (sampling, iterations, checkpoints); needs ding[otel]
            enable=False,
            otlp_endpoint=None,      # e.g. 'http://127.0.0.1:4318' (OTLP/HTTP); None: spans are not exported
            service_name='ding-learner',
        ),
    )

This package's top level imports nothing heavy. Its modules: ``runtime`` (``ServiceRuntime``: one run's
parts), ``learner_hooks`` (the hooks that feed them), ``tunables`` (the settings a run offers to tune,
registered through the runtime so each gets its gauge), ``hooks`` (the serial pipeline's wiring; re-exports
the names above), ``run_control``, ``run_control_state`` and ``tune_bounds`` (the pause / tune / terminate
state machine, the state it reports and what may change), ``http`` (the server), ``weights``
(``WeightsStore``, the server side of ``/weights/*``), ``weights_stream`` (``/weights/stream``), ``metrics``,
``tracing`` (OpenTelemetry spans, the optional ``otel`` extra), ``json_log`` and ``run_file`` (``run.json``).
The weights client lives below the workers in ``ding.worker.collector.weights_client`` (re-exported by
``ding.service.weights``); ``ding ctl`` is ``ding.entry.ctl``.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlsplit

from easydict import EasyDict

from ding.config.errors import ConfigError
from ding.config.writer import REDACTED
from ding.utils.lazy_import import lazy_exports

TRACING_DEFAULTS = dict(enable=False, otlp_endpoint=None, service_name='ding-learner')
SERVICE_DEFAULTS = dict(
    enable=False,
    host='127.0.0.1',
    port=0,
    token=None,
    json_log=False,
    json_log_every=100,
    health_stuck_seconds=300.0,
    weights_freq=100,
    tracing=TRACING_DEFAULTS,
)
# What the otel extra installs; tracing.enable=True is refused up front without them.
OTEL_MODULES = ('opentelemetry.sdk', 'opentelemetry.exporter.otlp.proto.http')


def _error(message: str) -> Exception:
    return ConfigError(message)


def check_service_config(section: Mapping[str, Any] | None) -> EasyDict:
    """The ``service`` section merged over ``SERVICE_DEFAULTS``; ``ConfigError`` naming ``service.KEY``."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise _error(f'service: expected a dict (section), got {type(section).__name__} {section!r}')
    unknown = sorted(set(section) - set(SERVICE_DEFAULTS) - {'cfg_type'})
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), list(SERVICE_DEFAULTS), n=1)
            hints.append(f'service.{key}' + (f" (did you mean '{close[0]}'?)" if close else ''))
        raise _error(
            f'unknown key(s) in the service section: {", ".join(hints)}; valid keys: {sorted(SERVICE_DEFAULTS)}'
        )
    cfg = EasyDict(dict(SERVICE_DEFAULTS, **{k: v for k, v in section.items() if k != 'cfg_type'}))
    problems = []

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    for key in ('enable', 'json_log'):
        if not isinstance(cfg[key], bool):
            problems.append(f'service.{key}: expected True or False, got {cfg[key]!r}')
    if not isinstance(cfg.host, str) or not cfg.host:
        problems.append(f'service.host: expected an address string, got {cfg.host!r}')
    if not is_int(cfg.port) or not 0 <= cfg.port <= 65535:
        problems.append(f'service.port: expected an int in [0, 65535] (0: any free port), got {cfg.port!r}')
    if cfg.token is not None and (
        not isinstance(cfg.token, str) or len(cfg.token) < 8 or any(c.isspace() for c in cfg.token)
    ):
        problems.append(
            'service.token: expected None (generate one) or a string of at least 8 characters without spaces'
        )
    elif cfg.token == REDACTED:  # read back from a config dump, which never holds the token
        problems.append(f'service.token: {REDACTED!r} comes from a config dump; set the token again, or None')
    for key in ('json_log_every', 'weights_freq'):
        if not is_int(cfg[key]) or cfg[key] < 0:
            problems.append(f'service.{key}: expected an int >= 0, got {cfg[key]!r}')
    stuck = cfg.health_stuck_seconds
    if isinstance(stuck, bool) or not isinstance(stuck, (int, float)) or math.isnan(stuck) or not stuck > 0:
        problems.append(f'service.health_stuck_seconds: expected a number > 0, got {stuck!r}')
    try:
        cfg.tracing = check_tracing_config(cfg.tracing)
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        raise _error('invalid service config:\n  ' + '\n  '.join(problems))
    cfg.health_stuck_seconds = float(stuck)
    return cfg


def service_section_enabled(section: Any) -> bool:
    """Whether a ``service`` section asks for anything (the HTTP server, the JSON log or traces)."""
    if not isinstance(section, Mapping):
        return False
    tracing = section.get('tracing')
    traced = isinstance(tracing, Mapping) and bool(tracing.get('enable'))
    return bool(section.get('enable') or section.get('json_log') or traced)


def _otel_installed() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in OTEL_MODULES)
    except ModuleNotFoundError:  # a parent package is missing
        return False


def check_tracing_config(section: Mapping[str, Any] | None) -> EasyDict:
    """``service.tracing`` merged over ``TRACING_DEFAULTS``; ``ConfigError`` naming ``service.tracing.KEY``,
    and naming the ``otel`` extra when tracing is enabled without it."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise _error(f'service.tracing: expected a dict (section), got {type(section).__name__} {section!r}')
    unknown = sorted(set(section) - set(TRACING_DEFAULTS))
    if unknown:
        raise _error(
            f'unknown key(s) in service.tracing: {", ".join(map(str, unknown))}; valid keys: {sorted(TRACING_DEFAULTS)}'
        )
    cfg = EasyDict(dict(TRACING_DEFAULTS, **section))
    if not isinstance(cfg.enable, bool):
        raise _error(f'service.tracing.enable: expected True or False, got {cfg.enable!r}')
    endpoint = cfg.otlp_endpoint
    if endpoint is not None:
        parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
        try:
            port_ok = parts is not None and parts.port is not None
        except ValueError:
            port_ok = False
        if parts is None or parts.scheme not in ('http', 'https') or not parts.hostname or not port_ok:
            raise _error(
                f"service.tracing.otlp_endpoint: expected None or 'http(s)://HOST:PORT' (an OTLP/HTTP collector, "
                f"e.g. 'http://127.0.0.1:4318'), got {endpoint!r}"
            )
    if not isinstance(cfg.service_name, str) or not cfg.service_name.strip():
        raise _error(f'service.tracing.service_name: expected a non-empty string, got {cfg.service_name!r}')
    if cfg.enable and not _otel_installed():
        raise _error(
            "service.tracing.enable=True needs OpenTelemetry, which is not installed: pip install 'ding[otel]' "
            '(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)'
        )
    return cfg


_EXPORTS = {
    'ServiceRuntime': '.hooks',
    'attach_serial_service': '.hooks',
    'start_service': '.hooks',
    'service_enabled': '.hooks',
    'MetricsHook': '.hooks',
    'PublishWeightsHook': '.hooks',
    'RunControlHook': '.hooks',
    'RunControl': '.run_control',
    'TuneError': '.run_control',
    'RunStateError': '.run_control',
    'ServiceMetrics': '.metrics',
    'WeightsStore': '.weights',
    'WeightsClient': '.weights',
    'WeightsFollower': '.weights',
    'JsonEventLog': '.json_log',
    'ServiceServer': '.http',
    'serve': '.http',
}

__all__ = [
    'SERVICE_DEFAULTS',
    'TRACING_DEFAULTS',
    'check_service_config',
    'check_tracing_config',
    'service_section_enabled',
] + list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
