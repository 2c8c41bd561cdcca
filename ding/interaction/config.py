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

# Larger request bodies are refused with 413 (REQUEST_INVALID) before being read into memory.
MAX_REQUEST_BYTES = 256 * 1024 * 1024
