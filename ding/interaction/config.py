"""Default values of the interaction layer (ports, heartbeat timing, request retries)."""

# Channel 0 is fine for tests; real deployments should pick their own so that two pipelines on one
# machine never talk to each other by accident.
DEFAULT_CHANNEL = 0

DEFAULT_MASTER_PORT = 7235
DEFAULT_SLAVE_PORT = 7236

LOCAL_HOST = '127.0.0.1'
GLOBAL_HOST = '0.0.0.0'
WILDCARD_HOSTS = ('', '0.0.0.0', '::')

# Slave sends a heartbeat every DEFAULT_HEARTBEAT_SPAN seconds; the master drops a slave whose last
# heartbeat is older than DEFAULT_HEARTBEAT_TOLERANCE (checked every DEFAULT_HEARTBEAT_CHECK_SPAN).
DEFAULT_HEARTBEAT_SPAN = 3.0
DEFAULT_HEARTBEAT_TOLERANCE = 15.0
DEFAULT_HEARTBEAT_CHECK_SPAN = 0.1

# A request is tried 1 + retries times (only on connection errors and 5xx answers).
DEFAULT_REQUEST_RETRIES = 5
DEFAULT_REQUEST_RETRY_WAITING = 1.0
DEFAULT_REQUEST_TIMEOUT = 10.0

# How often the serving loop looks at its stop flag; bounds the latency of shutdown().
SERVE_POLL_INTERVAL = 0.05

# Request bodies are refused with 413 (REQUEST_INVALID) from their Content-Length, before being read: control
# routes (connect, disconnect, ping, shutdown, heartbeats, the run service's /run/*) carry a few hundred bytes and
# are reachable before authentication, so they get the small limit; only the task routes that carry task data
# (authenticated before their body is read) get the large one. A body without Content-Length is refused (411).
MAX_REQUEST_BYTES = 256 * 1024 * 1024
MAX_CONTROL_REQUEST_BYTES = 64 * 1024
# JSON bodies nested deeper than this are refused with 400 (ours nest 3-6 levels; a deep one costs recursion).
MAX_JSON_DEPTH = 64

# Every socket operation of a connection (reading the request line, headers and body, writing the answer) must
# progress within this many seconds, or the server closes the connection: a half-sent request holds a thread
# for at most this long.
DEFAULT_READ_TIMEOUT = 10.0
# Connections served at once (one thread each); further connections are answered 503 and closed at once.
DEFAULT_MAX_CONNECTIONS = 128
