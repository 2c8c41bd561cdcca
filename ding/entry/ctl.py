"""``ding ctl``: drive a running training from a shell through its run service.

    ding ctl status    [--address HOST:PORT | --exp-dir DIR] [--token T] [--json]
    ding ctl pause     [--wait S]
    ding ctl resume
    ding ctl tune      --set KEY=VALUE [--set KEY=VALUE ...] [--wait S]
    ding ctl terminate [--wait S]

``--exp-dir`` reads the address and the token from ``DIR/run.json`` (written by the run, mode 0600), and for a
run serving HTTPS (``system.tls``) the CA to trust (else ``--ca-file``).
Exit status: 0 done, 1 refused or unreachable, 2 bad usage.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

from ding.utils.weights_http import normalize_address

COMMANDS = ('status', 'pause', 'resume', 'tune', 'terminate')


class CtlError(Exception):
    """A request that could not be made or was refused; the message is for the user. A refusal by the run
    carries its HTTP ``status_code`` and the answer's ``data``."""

    def __init__(self, message: str, status_code: int | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.data = data


class RunServiceClient:
    """Small client of a run's ``/run/*`` endpoints (also usable from Python, e.g. by a coordinator).

    Built on the standard library's ``urllib``: ``ding ctl`` starts in a fraction of a second, and importing
    ``requests`` alone would cost more than that on a busy machine."""

    def __init__(
        self, address: str, token: str | None = None, timeout: float = 30.0, ca_file: str | None = None
    ) -> None:
        """``ca_file``: the CA an ``https://`` run's certificate must be signed by (default: the system's)."""
        self.base_url = normalize_address(address)
        self.timeout = timeout
        self._headers = {'Accept': 'application/json'}
        if token:
            self._headers['Authorization'] = f'Bearer {token}'
        # No proxy handler from the environment: the run is addressed directly, never through a proxy.
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if ca_file:
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file)))
        self._opener = urllib.request.build_opener(*handlers)

    def close(self) -> None:
        """Nothing is kept open between calls; kept so callers can close every client alike."""

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, extra_timeout: float = 0.0
    ) -> tuple[int, dict[str, Any]]:
        url = self.base_url + path
        headers = dict(self._headers)
        payload = None
        if body is not None:
            payload = json.dumps(body).encode('utf-8')
            headers['Content-Type'] = 'application/json'
        request = urllib.request.Request(url, data=payload, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout + extra_timeout) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as exc:  # 4xx / 5xx: the run's answer is in the body
            status, text = exc.code, exc.read()
        except (urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, 'reason', exc)
            raise CtlError(f'cannot reach the run at {self.base_url} (has it exited?): {reason}') from None
        except (OSError, http.client.HTTPException) as exc:  # timeouts, a connection cut mid-answer
            raise CtlError(f'{method} {url} failed: {exc}') from None
        try:
            envelope = json.loads(text)
        except ValueError:
            raise CtlError(f'{method} {url}: HTTP {status}, not a JSON answer: {text[:200]!r}') from None
        if not isinstance(envelope, dict):
            raise CtlError(f'{method} {url}: unexpected answer {envelope!r:.200}')
        if status >= 400 or envelope.get('success') is False:
            message = envelope.get('message') or f'HTTP {status}'
            raise CtlError(f'refused (HTTP {status}): {message}', status, envelope.get('data') or {})
        return status, envelope.get('data') or {}

    def status(self) -> dict[str, Any]:
        return self._call('GET', '/run/status')[1]

    def pause(self, wait: float = 10.0) -> dict[str, Any]:
        return self._call('POST', '/run/pause', {'wait': wait}, wait)[1]

    def resume(self) -> dict[str, Any]:
        return self._call('POST', '/run/resume', {})[1]

    def tune(self, changes: dict[str, Any], wait: float = 10.0) -> dict[str, Any]:
        return self._call('POST', '/run/tune', {'changes': changes, 'wait': wait}, wait)[1]

    def terminate(self, wait: float = 60.0) -> dict[str, Any]:
        return self._call('POST', '/run/terminate', {'wait': wait}, wait)[1]


def parse_assignment(text: str) -> tuple[str, Any]:
    """``'learning_rate=3e-4'`` -> ``('learning_rate', 0.0003)``; values are JSON (numbers, true/false),
    anything else is sent as a string (the run then says what it expected)."""
    key, sep, raw = text.partition('=')
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise CtlError(f'--set expects KEY=VALUE, got {text!r}')
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def _add_target_options(p: argparse.ArgumentParser, default: Any) -> None:
    # Accepted before and after the command; the subcommand copies default to SUPPRESS so they never
    # overwrite a value given before the command.
    p.add_argument('--address', default=default, metavar='HOST:PORT', help='the run service address')
    p.add_argument(
        '--exp-dir',
        default=default,
        metavar='DIR',
        help='experiment directory: read address and token from DIR/run.json',
    )
    p.add_argument('--token', default=default, help="the run's control token (default: from run.json)")
    p.add_argument(
        '--ca-file', default=default, metavar='PEM', help='CA of a run serving HTTPS (default: from run.json)'
    )
    p.add_argument('--timeout', type=float, default=default, help='seconds to wait for an answer (default 30)')
    p.add_argument('--json', action='store_true', default=default, help='print the raw JSON answer')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='ding ctl', description='Control a running training through its run service.')
    _add_target_options(p, None)
    sub = p.add_subparsers(dest='command', metavar='{' + ','.join(COMMANDS) + '}')
    helps = {
        'status': 'show state, iteration, hyperparameters and recent events',
        'pause': 'finish the in-flight iteration, then wait (heartbeats continue)',
        'resume': 'continue a paused run',
        'tune': 'change hyperparameters between iterations',
        'terminate': 'write a final checkpoint and exit cleanly',
    }
    for name in COMMANDS:
        sp = sub.add_parser(name, help=helps[name], description=helps[name])
        _add_target_options(sp, argparse.SUPPRESS)
        if name in ('pause', 'tune', 'terminate'):
            sp.add_argument(
                '--wait',
                type=float,
                default=60.0 if name == 'terminate' else 10.0,
                help='seconds to wait for the run to act on it (0: do not wait)',
            )
        if name == 'tune':
            sp.add_argument(
                '--set',
                action='append',
                default=[],
                metavar='KEY=VALUE',
                required=True,
                help='a change, e.g. --set learning_rate=3e-4 (repeatable)',
            )
    return p


def resolve_target(
    address: str | None, exp_dir: str | None, token: str | None, ca_file: str | None = None
) -> tuple[str, str | None, str | None]:
    """(address, token, ca_file) from the options, ``--exp-dir``'s run.json filling what is missing."""
    if exp_dir:
        path = os.path.join(exp_dir, 'run.json')
        try:
            with open(path, encoding='utf-8') as f:
                info = json.load(f)
        except FileNotFoundError:
            raise CtlError(f'{path} not found: is a run with service.enable=True running in {exp_dir}?') from None
        except (OSError, ValueError) as exc:
            raise CtlError(f'cannot read {path}: {exc}') from None
        address = address or info.get('url') or info.get('address')
        token = token or info.get('token')
        ca_file = ca_file or info.get('ca_file')
    if not address:
        raise CtlError('say which run: --address HOST:PORT or --exp-dir DIR (with a run.json)')
    return address, token, ca_file


def _print_status(data: dict[str, Any]) -> None:
    print(
        f'state: {data.get("state")}  iteration: {data.get("iteration")}  run: {data.get("run_id", "?")} '
        f'({data.get("exp_name", "?")}, pid {data.get("pid", "?")})'
    )
    if data.get('paused_at_iteration') is not None:
        print(f'paused at iteration: {data["paused_at_iteration"]}')
    print(
        f'last progress: {data.get("last_progress_age_seconds")} s ago  heartbeat: '
        f'{data.get("heartbeat_age_seconds")} s ago'
    )
    hp = data.get('hyperparameters') or {}
    bounds = data.get('tunable') or {}
    if hp:
        print('hyperparameters:')
        for key, value in hp.items():
            print(f'  {key} = {value}  (tune range {bounds.get(key, "?")})')
    for ev in (data.get('events') or [])[-5:]:
        print(f'event: {ev.get("event")} at iteration {ev.get("iteration")}')


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_usage(sys.stderr)
        print('ding ctl: error: choose a command: ' + ', '.join(COMMANDS), file=sys.stderr)
        return 2
    try:
        address, token, ca_file = resolve_target(args.address, args.exp_dir, args.token, args.ca_file)
        client = RunServiceClient(address, token, args.timeout or 30.0, ca_file)
    except CtlError as exc:
        print(f'ding ctl: error: {exc}', file=sys.stderr)
        return 2
    except ValueError as exc:  # a malformed address
        print(f'ding ctl: error: {exc}', file=sys.stderr)
        return 2
    try:
        if args.command == 'status':
            data = client.status()
        elif args.command == 'pause':
            data = client.pause(args.wait)
        elif args.command == 'resume':
            data = client.resume()
        elif args.command == 'terminate':
            data = client.terminate(args.wait)
        else:
            try:
                changes = dict(parse_assignment(s) for s in args.set)
            except CtlError as exc:
                print(f'ding ctl: error: {exc}', file=sys.stderr)
                return 2
            data = client.tune(changes, args.wait)
    except CtlError as exc:
        print(f'ding ctl: {exc}', file=sys.stderr)
        refusal = exc.data
        if args.json and refusal:
            print(json.dumps(refusal, indent=1))
        return 1
    finally:
        client.close()
    if args.json:
        print(json.dumps(data, indent=1))
    elif args.command == 'status':
        _print_status(data)
    elif args.command == 'tune':
        if data.get('applied'):
            for key, change in (data.get('changes') or {}).items():
                print(f'{key}: {change.get("old")} -> {change.get("new")} (iteration {data.get("iteration")})')
        else:
            print(
                f'tune accepted (ticket {data.get("ticket")}); applied before the next iteration: {data.get("changes")}'
            )
    else:
        line = f'state: {data.get("state")}  iteration: {data.get("iteration")}'
        result = data.get('result') or {}
        if result.get('checkpoint'):
            line += f'  final checkpoint: {result["checkpoint"]}'
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


__all__ = ['RunServiceClient', 'CtlError', 'run', 'main', 'parse_assignment', 'resolve_target']
