"""Error codes answered by a master, and one client-side exception class per code."""

from enum import IntEnum
from typing import Any

import requests

from .base import ResponseException, _response_of, get_values_from_response


class MasterErrorCode(IntEnum):
    """Codes in the ``code`` field of a master's answers."""

    SUCCESS = 0

    SYSTEM_SHUTTING_DOWN = 101  # the master is stopping and takes no more requests
    REQUEST_INVALID = 102  # body is not a JSON object
    ROUTE_NOT_FOUND = 103
    METHOD_NOT_ALLOWED = 104
    UNKNOWN_ERROR = 199  # unexpected server-side error

    CHANNEL_NOT_GIVEN = 201
    CHANNEL_NOT_MATCH = 202

    SELF_TOKEN_NOT_GIVEN = 401  # self requests (shutdown) need the master's own token
    SELF_TOKEN_NOT_MATCH = 402

    SLAVE_TOKEN_NOT_GIVEN = 501  # slave callbacks need the token the slave got at connect time
    SLAVE_TOKEN_NOT_MATCH = 502  # no connected slave holds this token

    TASK_DATA_INVALID = 601  # task report lacks the task id or carries a non-object result
    TASK_NOT_EXIST = 602  # no task in flight with this id (finished, timed out or never sent)

    # DI-engine's names for the same codes
    CHANNEL_INVALID = 202
    SELF_TOKEN_INVALID = 402
    SLAVE_TOKEN_INVALID = 502


MASTER_HTTP_STATUS: dict[MasterErrorCode, int] = {
    MasterErrorCode.SUCCESS: 200,
    MasterErrorCode.SYSTEM_SHUTTING_DOWN: 503,
    MasterErrorCode.REQUEST_INVALID: 400,
    MasterErrorCode.ROUTE_NOT_FOUND: 404,
    MasterErrorCode.METHOD_NOT_ALLOWED: 405,
    MasterErrorCode.UNKNOWN_ERROR: 500,
    MasterErrorCode.CHANNEL_NOT_GIVEN: 400,
    MasterErrorCode.CHANNEL_NOT_MATCH: 403,
    MasterErrorCode.SELF_TOKEN_NOT_GIVEN: 401,
    MasterErrorCode.SELF_TOKEN_NOT_MATCH: 403,
    MasterErrorCode.SLAVE_TOKEN_NOT_GIVEN: 401,
    MasterErrorCode.SLAVE_TOKEN_NOT_MATCH: 403,
    MasterErrorCode.TASK_DATA_INVALID: 400,
    MasterErrorCode.TASK_NOT_EXIST: 404,
}


class MasterResponseException(ResponseException):
    """A request to a master failed; the subclass names the error code."""


class MasterSuccess(MasterResponseException):
    pass


class MasterSystemShuttingDown(MasterResponseException):
    pass


class MasterRequestInvalid(MasterResponseException):
    pass


class MasterRouteNotFound(MasterResponseException):
    pass


class MasterMethodNotAllowed(MasterResponseException):
    pass


class MasterUnknownError(MasterResponseException):
    pass


class MasterChannelNotGiven(MasterResponseException):
    pass


class MasterChannelNotMatch(MasterResponseException):
    pass


class MasterSelfTokenNotGiven(MasterResponseException):
    pass


class MasterSelfTokenNotMatch(MasterResponseException):
    pass


class MasterSlaveTokenNotGiven(MasterResponseException):
    pass


class MasterSlaveTokenNotMatch(MasterResponseException):
    pass


class MasterTaskDataInvalid(MasterResponseException):
    pass


class MasterTaskNotExist(MasterResponseException):
    pass


# DI-engine's class names
MasterChannelInvalid = MasterChannelNotMatch
MasterSelfTokenInvalid = MasterSelfTokenNotMatch
MasterSlaveTokenInvalid = MasterSlaveTokenNotMatch

_MASTER_EXCEPTIONS: dict[MasterErrorCode, type[MasterResponseException]] = {
    MasterErrorCode.SUCCESS: MasterSuccess,
    MasterErrorCode.SYSTEM_SHUTTING_DOWN: MasterSystemShuttingDown,
    MasterErrorCode.REQUEST_INVALID: MasterRequestInvalid,
    MasterErrorCode.ROUTE_NOT_FOUND: MasterRouteNotFound,
    MasterErrorCode.METHOD_NOT_ALLOWED: MasterMethodNotAllowed,
    MasterErrorCode.UNKNOWN_ERROR: MasterUnknownError,
    MasterErrorCode.CHANNEL_NOT_GIVEN: MasterChannelNotGiven,
    MasterErrorCode.CHANNEL_NOT_MATCH: MasterChannelNotMatch,
    MasterErrorCode.SELF_TOKEN_NOT_GIVEN: MasterSelfTokenNotGiven,
    MasterErrorCode.SELF_TOKEN_NOT_MATCH: MasterSelfTokenNotMatch,
    MasterErrorCode.SLAVE_TOKEN_NOT_GIVEN: MasterSlaveTokenNotGiven,
    MasterErrorCode.SLAVE_TOKEN_NOT_MATCH: MasterSlaveTokenNotMatch,
    MasterErrorCode.TASK_DATA_INVALID: MasterTaskDataInvalid,
    MasterErrorCode.TASK_NOT_EXIST: MasterTaskNotExist,
}


def get_master_exception_class_by_error_code(code: int | MasterErrorCode) -> type[MasterResponseException]:
    """The exception class of a master error code; ``ValueError`` for a code masters never answer."""
    try:
        return _MASTER_EXCEPTIONS[MasterErrorCode(code)]
    except ValueError:
        raise ValueError(f'unknown master error code {code!r}') from None


def get_master_exception_by_error(error: requests.HTTPError | requests.Response | Any) -> MasterResponseException:
    """
    Turn a failed answer of a master (a ``requests.Response`` or an ``HTTPError`` carrying one) into the
    exception of its error code; an answer without a known code gives a plain ``MasterResponseException``.
    """
    response = _response_of(error)
    code = get_values_from_response(response).code
    try:
        cls = get_master_exception_class_by_error_code(code) if code is not None else MasterResponseException
    except ValueError:
        cls = MasterResponseException
    return cls(response)


__all__ = [
    'MasterErrorCode',
    'MASTER_HTTP_STATUS',
    'get_master_exception_class_by_error_code',
    'get_master_exception_by_error',
    'MasterChannelInvalid',
    'MasterChannelNotGiven',
    'MasterChannelNotMatch',
    'MasterMethodNotAllowed',
    'MasterRequestInvalid',
    'MasterResponseException',
    'MasterRouteNotFound',
    'MasterSelfTokenInvalid',
    'MasterSelfTokenNotGiven',
    'MasterSelfTokenNotMatch',
    'MasterSlaveTokenInvalid',
    'MasterSlaveTokenNotGiven',
    'MasterSlaveTokenNotMatch',
    'MasterSuccess',
    'MasterSystemShuttingDown',
    'MasterTaskDataInvalid',
    'MasterTaskNotExist',
    'MasterUnknownError',
]
