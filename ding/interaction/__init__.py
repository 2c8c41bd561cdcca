"""
Interaction layer of the parallel pipeline: a Master (coordinator) and Slaves (learners, collectors)
talking JSON over HTTP (Flask served by werkzeug in background threads). Import it only where the
parallel mode is used: it pulls in flask.
"""

from .base import HttpClient, HttpLimits, get_host_ip
from .config import (
    DEFAULT_CHANNEL,
    DEFAULT_HEARTBEAT_CHECK_SPAN,
    DEFAULT_HEARTBEAT_SPAN,
    DEFAULT_HEARTBEAT_TOLERANCE,
    DEFAULT_MASTER_PORT,
    DEFAULT_REQUEST_RETRIES,
    DEFAULT_REQUEST_RETRY_WAITING,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SLAVE_PORT,
)
from .exception import *  # noqa: F401,F403  (error codes and one exception class per code)
from .exception import (
    MasterErrorCode,
    MasterResponseException,
    ResponseException,
    SlaveErrorCode,
    SlaveResponseException,
    get_master_exception_by_error,
    get_master_exception_class_by_error_code,
    get_slave_exception_by_error,
    get_slave_exception_class_by_error_code,
)
from .master import Master, SlaveConnectionProxy, SlaveNotAuthenticated, Task, TaskStatus
from .slave import CallbackSlave, ConnectionRefuse, DisconnectionRefuse, Slave, TaskFail, TaskRefuse
