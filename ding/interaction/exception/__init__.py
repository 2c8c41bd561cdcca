"""Error codes of masters and slaves and the exceptions raised client-side for them."""

from enum import IntEnum

from . import master as _master
from . import slave as _slave
from .base import ResponseException, ResponseValues, get_values_from_response
from .master import *  # noqa: F401,F403  (one class per code; listed in master.py)
from .master import (
    MASTER_HTTP_STATUS,
    MasterErrorCode,
    MasterResponseException,
    get_master_exception_by_error,
    get_master_exception_class_by_error_code,
)
from .slave import *  # noqa: F401,F403
from .slave import (
    SLAVE_HTTP_STATUS,
    SlaveErrorCode,
    SlaveResponseException,
    get_slave_exception_by_error,
    get_slave_exception_class_by_error_code,
)


def http_status_of(code: IntEnum) -> int:
    """The HTTP status a server answers with for ``code`` (a MasterErrorCode or SlaveErrorCode)."""
    if isinstance(code, MasterErrorCode):
        return MASTER_HTTP_STATUS[code]
    if isinstance(code, SlaveErrorCode):
        return SLAVE_HTTP_STATUS[code]
    raise TypeError(f'expected a MasterErrorCode or SlaveErrorCode, got {code!r}')


__all__ = (
    ['ResponseException', 'ResponseValues', 'get_values_from_response', 'http_status_of']
    + _master.__all__
    + _slave.__all__
)
