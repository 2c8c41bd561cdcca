"""A man-in-the-middle for ``/weights/*`` tests: a real HTTP server on 127.0.0.1 that forwards GETs to a
learner's service and lets a test rewrite each answer (status, headers, body) on the way back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.helpers.service import session

Answer = tuple[int, dict[str, str], bytes]
# Headers a weights answer carries that the proxy passes on (the others are the hop's own).
PASSED_HEADERS = (
    'X-Weights-Version',
    'X-Weights-SHA256',
    'X-Weights-Run-Id',
    'X-Weights-Signature',
    'ETag',
    'Content-Type',
)


class WeightsProxy:
    """Forwards GETs to ``upstream`` (``http://host:port``); ``rewrite(path, answer) -> answer`` changes what
    goes back (default: nothing). ``address`` is the proxy's ``host:port``."""

    def __init__(self, upstream: str, rewrite: Callable[[str, Answer], Answer] | None = None) -> None:
        http = session()
        self.rewrite = rewrite or (lambda path, answer: answer)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ('if-none-match', 'authorization')}
                got = http.get(upstream + self.path, headers=headers)
                kept = {k: got.headers[k] for k in PASSED_HEADERS if k in got.headers}
                status, out_headers, body = proxy.rewrite(self.path, (got.status_code, kept, got.content))
                self.send_response(status)
                for key, value in out_headers.items():
                    self.send_header(key, value)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._http = http
        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.address = f'127.0.0.1:{self.server.server_address[1]}'
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
        self._http.close()

    def __enter__(self) -> WeightsProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
