"""Error codes answered by a slave, and one client-side exception class per code."""

from enum import IntEnum
from typing import Any

import requests

from .base import ResponseException, _response_of, get_values_from_response


class SlaveErrorCode(IntEnum):
    """Codes in the ``code`` field of a slave's answers."""

    SUCCESS = 0

    SYSTEM_SHUTTING_DOWN = 101  # the slave is stopping and takes no more requests
    REQUEST_INVALID = 102  # body is not a JSON object or lacks a required field
    ROUTE_NOT_FOUND = 103
    METHOD_NOT_ALLOWED = 104
    UNKNOWN_ERROR = 199  # unexpected server-side error (e.g. a hook returned non-JSON data)

    CHANNEL_NOT_GIVEN = 201
    CHANNEL_NOT_MATCH = 202

    MASTER_TOKEN_NOT_GIVEN = 301  # master requests need the token chosen by the master at connect time
    MASTER_TOKEN_NOT_MATCH = 302
    MASTER_SECRET_NOT_GIVEN = 303  # a slave with a run secret needs a connect proof (``ding.interaction.base.auth``)
    MASTER_SECRET_NOT_MATCH = 304  # the connect proof is wrong, stale or replayed

    SELF_TOKEN_NOT_GIVEN = 401  # self requests (shutdown) need the slave's own token
    SELF_TOKEN_NOT_MATCH = 402

    SLAVE_ALREADY_CONNECTED = 501
    SLAVE_NOT_CONNECTED = 502
    SLAVE_CONNECTION_REFUSED = 503  # ``_before_connection`` raised ConnectionRefuse
    SLAVE_DISCONNECTION_REFUSED = 504  # ``_before_disconnection`` raised DisconnectionRefuse

    TASK_ALREADY_EXIST = 601  # the slave is busy with a task (one task at a time)
    TASK_REFUSED = 602  # ``_before_task`` raised TaskRefuse
    TASK_DATA_INVALID = 603  # task lacks its id or its data is not an object

    # DI-engine's names for the same codes
    CHANNEL_NOT_FOUND = 201
    CHANNEL_INVALID = 202
    MASTER_TOKEN_NOT_FOUND = 301
    MASTER_TOKEN_INVALID = 302
    SELF_TOKEN_NOT_FOUND = 401
    SELF_TOKEN_INVALID = 402


SLAVE_HTTP_STATUS: dict[SlaveErrorCode, int] = {
    SlaveErrorCode.SUCCESS: 200,
    SlaveErrorCode.SYSTEM_SHUTTING_DOWN: 503,
    SlaveErrorCode.REQUEST_INVALID: 400,
    SlaveErrorCode.ROUTE_NOT_FOUND: 404,
    SlaveErrorCode.METHOD_NOT_ALLOWED: 405,
    SlaveErrorCode.UNKNOWN_ERROR: 500,
    SlaveErrorCode.CHANNEL_NOT_GIVEN: 400,
    SlaveErrorCode.CHANNEL_NOT_MATCH: 403,
    SlaveErrorCode.MASTER_TOKEN_NOT_GIVEN: 401,
    SlaveErrorCode.MASTER_TOKEN_NOT_MATCH: 403,
    SlaveErrorCode.MASTER_SECRET_NOT_GIVEN: 401,
    SlaveErrorCode.MASTER_SECRET_NOT_MATCH: 403,
    SlaveErrorCode.SELF_TOKEN_NOT_GIVEN: 401,
    SlaveErrorCode.SELF_TOKEN_NOT_MATCH: 403,
    SlaveErrorCode.SLAVE_ALREADY_CONNECTED: 409,
    SlaveErrorCode.SLAVE_NOT_CONNECTED: 409,
    SlaveErrorCode.SLAVE_CONNECTION_REFUSED: 403,
    SlaveErrorCode.SLAVE_DISCONNECTION_REFUSED: 403,
    SlaveErrorCode.TASK_ALREADY_EXIST: 409,
    SlaveErrorCode.TASK_REFUSED: 403,
    SlaveErrorCode.TASK_DATA_INVALID: 400,
}


class SlaveResponseException(ResponseException):
    """A request to a slave failed; the subclass names the error code."""


class SlaveSuccess(SlaveResponseException):
    pass


class SlaveSystemShuttingDown(SlaveResponseException):
    pass


class SlaveRequestInvalid(SlaveResponseException):
    pass


class SlaveRouteNotFound(SlaveResponseException):
    pass


class SlaveMethodNotAllowed(SlaveResponseException):
    pass


class SlaveUnknownError(SlaveResponseException):
    pass


class SlaveChannelNotGiven(SlaveResponseException):
    pass


class SlaveChannelNotMatch(SlaveResponseException):
    pass


class SlaveMasterTokenNotGiven(SlaveResponseException):
    pass


class SlaveMasterTokenNotMatch(SlaveResponseException):
    pass


class SlaveMasterSecretNotGiven(SlaveResponseException):
    pass


class SlaveMasterSecretNotMatch(SlaveResponseException):
    pass


class SlaveSelfTokenNotGiven(SlaveResponseException):
    pass


class SlaveSelfTokenNotMatch(SlaveResponseException):
    pass


class SlaveSlaveAlreadyConnected(SlaveResponseException):
    pass


class SlaveSlaveNotConnected(SlaveResponseException):
    pass


class SlaveSlaveConnectionRefused(SlaveResponseException):
    pass


class SlaveSlaveDisconnectionRefused(SlaveResponseException):
    pass


class SlaveTaskAlreadyExist(SlaveResponseException):
    pass


class SlaveTaskRefused(SlaveResponseException):
    pass


class SlaveTaskDataInvalid(SlaveResponseException):
    pass


# DI-engine's class names
SlaveChannelNotFound = SlaveChannelNotGiven
SlaveChannelInvalid = SlaveChannelNotMatch
SlaveMasterTokenNotFound = SlaveMasterTokenNotGiven
SlaveMasterTokenInvalid = SlaveMasterTokenNotMatch
SlaveSelfTokenNotFound = SlaveSelfTokenNotGiven
SlaveSelfTokenInvalid = SlaveSelfTokenNotMatch

_SLAVE_EXCEPTIONS: dict[SlaveErrorCode, type[SlaveResponseException]] = {
    SlaveErrorCode.SUCCESS: SlaveSuccess,
    SlaveErrorCode.SYSTEM_SHUTTING_DOWN: SlaveSystemShuttingDown,
    SlaveErrorCode.REQUEST_INVALID: SlaveRequestInvalid,
    SlaveErrorCode.ROUTE_NOT_FOUND: SlaveRouteNotFound,
    SlaveErrorCode.METHOD_NOT_ALLOWED: SlaveMethodNotAllowed,
    SlaveErrorCode.UNKNOWN_ERROR: SlaveUnknownError,
    SlaveErrorCode.CHANNEL_NOT_GIVEN: SlaveChannelNotGiven,
    SlaveErrorCode.CHANNEL_NOT_MATCH: SlaveChannelNotMatch,
    SlaveErrorCode.MASTER_TOKEN_NOT_GIVEN: SlaveMasterTokenNotGiven,
    SlaveErrorCode.MASTER_TOKEN_NOT_MATCH: SlaveMasterTokenNotMatch,
    SlaveErrorCode.MASTER_SECRET_NOT_GIVEN: SlaveMasterSecretNotGiven,
    SlaveErrorCode.MASTER_SECRET_NOT_MATCH: SlaveMasterSecretNotMatch,
    SlaveErrorCode.SELF_TOKEN_NOT_GIVEN: SlaveSelfTokenNotGiven,
    SlaveErrorCode.SELF_TOKEN_NOT_MATCH: SlaveSelfTokenNotMatch,
    SlaveErrorCode.SLAVE_ALREADY_CONNECTED: SlaveSlaveAlreadyConnected,
    SlaveErrorCode.SLAVE_NOT_CONNECTED: SlaveSlaveNotConnected,
    SlaveErrorCode.SLAVE_CONNECTION_REFUSED: SlaveSlaveConnectionRefused,
    SlaveErrorCode.SLAVE_DISCONNECTION_REFUSED: SlaveSlaveDisconnectionRefused,
    SlaveErrorCode.TASK_ALREADY_EXIST: SlaveTaskAlreadyExist,
    SlaveErrorCode.TASK_REFUSED: SlaveTaskRefused,
    SlaveErrorCode.TASK_DATA_INVALID: SlaveTaskDataInvalid,
}


def get_slave_exception_class_by_error_code(code: int | SlaveErrorCode) -> type[SlaveResponseException]:
    """The exception class of a slave error code; ``ValueError`` for a code slaves never answer."""
    try:
        return _SLAVE_EXCEPTIONS[SlaveErrorCode(code)]
    except ValueError:
        raise ValueError(f'unknown slave error code {code!r}') from None


def get_slave_exception_by_error(error: requests.HTTPError | requests.Response | Any) -> SlaveResponseException:
    """
    Turn a failed answer of a slave (a ``requests.Response`` or an ``HTTPError`` carrying one) into the
    exception of its error code; an answer without a known code gives a plain ``SlaveResponseException``.
    """
    response = _response_of(error)
    code = get_values_from_response(response).code
    try:
        cls = get_slave_exception_class_by_error_code(code) if code is not None else SlaveResponseException
    except ValueError:
        cls = SlaveResponseException
    return cls(response)


__all__ = [
    'SlaveErrorCode',
    'SLAVE_HTTP_STATUS',
    'get_slave_exception_class_by_error_code',
    'get_slave_exception_by_error',
    'SlaveChannelInvalid',
    'SlaveChannelNotFound',
    'SlaveChannelNotGiven',
    'SlaveChannelNotMatch',
    'SlaveMasterSecretNotGiven',
    'SlaveMasterSecretNotMatch',
    'SlaveMasterTokenInvalid',
    'SlaveMasterTokenNotFound',
    'SlaveMasterTokenNotGiven',
    'SlaveMasterTokenNotMatch',
    'SlaveMethodNotAllowed',
    'SlaveRequestInvalid',
    'SlaveResponseException',
    'SlaveRouteNotFound',
    'SlaveSelfTokenInvalid',
    'SlaveSelfTokenNotFound',
    'SlaveSelfTokenNotGiven',
    'SlaveSelfTokenNotMatch',
    'SlaveSlaveAlreadyConnected',
    'SlaveSlaveConnectionRefused',
    'SlaveSlaveDisconnectionRefused',
    'SlaveSlaveNotConnected',
    'SlaveSuccess',
    'SlaveSystemShuttingDown',
    'SlaveTaskAlreadyExist',
    'SlaveTaskDataInvalid',
    'SlaveTaskRefused',
    'SlaveUnknownError',
]
