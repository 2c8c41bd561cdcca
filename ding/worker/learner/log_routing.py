"""Where the values a policy's ``forward`` returns go in the learner's log buffers, and the priority info a
prioritised replay buffer gets back."""

from __future__ import annotations

from typing import Any

from ding.utils.default_helper import LogDict


def route_log_vars(log_buffer: dict[str, LogDict], log_vars: dict[str, Any]) -> None:
    """Route ``[histogram]`` / ``[scalars]`` keys to their buffers (taking them out of ``log_vars``), the rest
    to the scalar buffer."""
    scalar = log_buffer['scalar']
    set_plain = dict.__setitem__  # python floats need none of LogDict's conversions
    routed = None
    for k, v in log_vars.items():
        if k.startswith('['):
            if routed is None:
                routed = []
            routed.append(k)
        elif v.__class__ is float:
            set_plain(scalar, k, v)
        else:
            scalar[k] = v
    if routed is not None:
        for k in routed:
            if k.startswith('[histogram]'):
                log_buffer['histogram'][k[len('[histogram]') :]] = log_vars.pop(k)
            elif k.startswith('[scalars]'):
                log_buffer['scalars'][k[len('[scalars]') :]] = log_vars.pop(k)
            else:  # some other bracketed name: an ordinary scalar
                scalar[k] = log_vars[k]


def _as_list(value: Any) -> Any:
    return value.tolist() if hasattr(value, 'tolist') else value


def priority_info_of(priority: Any, data: Any) -> dict[str, Any]:
    """``{'priority', 'replay_buffer_idx', 'replay_unique_id'}`` of a trained batch (a collated dict or a list
    of sample dicts)."""
    if isinstance(data, dict):
        idx = _as_list(data.get('replay_buffer_idx'))
        uid = _as_list(data.get('replay_unique_id'))
    else:
        idx = [d.get('replay_buffer_idx') for d in data]
        uid = [d.get('replay_unique_id') for d in data]
    return {'priority': priority, 'replay_buffer_idx': idx, 'replay_unique_id': uid}


__all__ = ['route_log_vars', 'priority_info_of']
