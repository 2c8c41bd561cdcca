"""Newer policy weights for a parallel collector task, from the learner's policy file (``'fs'``) or its
``GET /weights/current`` (``'http'``), looked for at most every ``update_policy_second`` (``'http'`` with
``weights_refresh='subscribe'``: at every update, after the learner's ``/weights/stream`` announced a version).

Over HTTP with the run secret (``use_run_secret``) the weights' signatures are verified and the stream is
opened with the token derived from the secret; without it the sha256 alone is checked (``accept_unsigned``).

A missing, truncated, corrupt or mismatched file or payload is logged and skipped: the policy keeps acting
with its last good weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ding.utils.checkpoint import CheckpointError
from ding.utils.weights_signing import weights_signing_key, weights_stream_token

from .weights_client import WeightsClient, WeightsFollower, state_dict_mismatch

WEIGHTS_REFRESH_MODES = ('poll', 'subscribe')


def check_weights_refresh(value: Any, where: str = 'weights_refresh') -> str:
    """``'poll'`` or ``'subscribe'``; ``ValueError`` naming ``where`` otherwise."""
    if value not in WEIGHTS_REFRESH_MODES:
        raise ValueError(f'{where} must be one of {list(WEIGHTS_REFRESH_MODES)}, got {value!r}')
    return value


class PolicyUpdater:
    """Loads newer weights into a policy (``update``), returning their version (the learner iteration).

    ``read_policy_file(path)`` (``'fs'``) returns ``{'model': state_dict, 'iter': version}`` for a file
    version not seen yet, or None; the comm collector binds it.
    """

    def __init__(
        self,
        transport: str,
        update_policy_second: float,
        path_policy: str | None,
        weights_address: str | None,
        logger: Any,
        prefix: str,
        refresh: str = 'poll',
    ) -> None:
        self._transport = transport  # 'fs' or 'http', checked by the caller (check_policy_transport)
        self._refresh = check_weights_refresh(refresh)
        self._run_secret: str | None = None
        self._interval = float(update_policy_second)
        self._path_policy = path_policy
        self._weights_address = weights_address
        self._logger = logger
        self._prefix = prefix
        self._follower: WeightsFollower | None = None
        self._last_check = -math.inf

    def use_run_secret(self, secret: str | None) -> None:
        """Verify the weights' signatures with the key derived from the run secret (before the first update)."""
        self._run_secret = secret or None

    @property
    def follower(self) -> WeightsFollower | None:
        """The HTTP follower once the first update over HTTP made it (its ``stats()``: loads, skipped versions)."""
        return self._follower

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower.client.close()

    def update(
        self,
        policy: Any,
        current: int,
        read_policy_file: Callable[[str], dict[str, Any] | None],
        force: bool = False,
    ) -> int | None:
        """The version of the weights just loaded into ``policy``, or None (not due, nothing newer, or
        skipped; ``current`` is the version it keeps acting with)."""
        now = time.monotonic()
        subscribed = self._follower is not None and self._follower.subscription is not None
        # Subscribed, an update costs no request until the stream announces a version: no need to space them.
        if not force and not subscribed and now - self._last_check < self._interval:
            return None
        self._last_check = now
        if self._transport == 'http':
            return self._update_http(policy, current)
        return self._update_fs(policy, current, read_policy_file)

    def _update_fs(
        self, policy: Any, current: int, read_policy_file: Callable[[str], dict[str, Any] | None]
    ) -> int | None:
        path = self._path_policy
        if not path:
            return None
        try:
            info = read_policy_file(path)
        except FileNotFoundError as exc:  # normal until the learner publishes its first weights
            self._logger.info(
                f'{self._prefix} policy file {path} skipped ({exc}); acting with the weights of policy_iter {current}'
            )
            return None
        except (CheckpointError, OSError, ValueError, KeyError) as exc:
            self._logger.warning(
                f'{self._prefix} policy file {path} skipped ({exc}); keeping the weights of policy_iter {current}'
            )
            return None
        if info is None:
            return None
        state, version = info['model'], int(info['iter'])
        problem = state_dict_mismatch(policy.state_dict()['model'], state)
        if problem is None:
            try:
                policy.load_state_dict({'model': state})
            except (RuntimeError, KeyError, TypeError, ValueError) as exc:
                problem = f'{type(exc).__name__}: {exc}'
        if problem is not None:
            self._logger.warning(
                f'{self._prefix} policy file {path} skipped: {problem}; keeping the weights of policy_iter {current}'
            )
            return None
        self._logger.info(f'{self._prefix} loaded policy_iter {version} from {path}')
        return version

    def _update_http(self, policy: Any, current: int) -> int | None:
        """The client checks the sha256, the follower keys / shapes / dtypes."""
        if not self._weights_address:
            self._logger.warning(
                f'{self._prefix} policy_transport is http but no weights_address is known '
                f'(is the service enabled?); acting with the weights of policy_iter {current}'
            )
            return None
        if self._follower is None:
            self._follower = self._make_follower(policy)
        follower = self._follower
        if not follower.sync() or follower.version is None:
            if follower.last_error is not None:  # None: nothing newer (not modified, or nothing announced)
                self._logger.warning(
                    f'{self._prefix} weights from {self._weights_address} skipped '
                    f'({follower.last_error}); keeping the weights of policy_iter {current}'
                )
            return None
        self._logger.info(
            f'{self._prefix} loaded policy_iter {follower.version} from {self._weights_address}'
            + (f' ({follower.skipped_versions} versions skipped so far)' if follower.skipped_versions else '')
        )
        return follower.version

    def _make_follower(self, policy: Any) -> WeightsFollower:
        address = self._weights_address or ''
        timeout = max(1.0, min(10.0, self._interval * 2))
        secret = self._run_secret
        if secret is None:
            # No run secret, no key: the sha256 alone is checked, signed or not (explicitly; docs/security.md).
            client = WeightsClient(address, timeout=timeout, accept_unsigned=True)
        else:
            client = WeightsClient(
                address, timeout=timeout, token=weights_stream_token(secret), signing_key=weights_signing_key(secret)
            )
        subscribe = self._refresh == 'subscribe'
        if subscribe and secret is None:
            self._logger.warning(
                f"{self._prefix} weights_refresh='subscribe' needs the run secret for /weights/stream; polling instead"
            )
            subscribe = False
        return WeightsFollower(client, policy, subscribe=subscribe)


__all__ = ['PolicyUpdater', 'check_weights_refresh', 'WEIGHTS_REFRESH_MODES']
