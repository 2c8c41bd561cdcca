"""Exploration schedules (standard library only: the parallel coordinator uses them without torch)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any


def get_epsilon_greedy_fn(start: float, end: float, decay: int, type_: str = 'exp') -> Callable[[int], float]:
    """Epsilon as a function of a step counter (usually env steps).

    - ``'exp'``: ``end + (start - end) * exp(-step / decay)``
    - ``'linear'``: from ``start`` at step 0 to ``end`` at step ``decay``, then held at ``end``.
    """
    if type_ not in ('exp', 'linear'):
        raise ValueError(f"epsilon schedule: type must be 'exp' or 'linear', got {type_!r}")
    if decay <= 0:
        raise ValueError(f'epsilon schedule: decay must be > 0, got {decay}')
    if type_ == 'exp':
        return lambda step: end + (start - end) * math.exp(-step / decay)

    def linear(step: int) -> float:
        if step >= decay:
            return end
        return start + (end - start) * max(step, 0) / decay

    return linear


class EpsCommandMode:
    """The command mode of an epsilon-greedy policy: collect setting ``{'eps': schedule(env steps)}``.

    ``eps_cfg`` is ``policy.other.eps`` (``type``, ``start``, ``end``, ``decay``). ``epsilon_greedy`` is the
    schedule in use; run control replaces it when the operator tunes ``eps.*``. Standard library only: the
    parallel coordinator builds this without the policy (and torch), and ``EpsCommandModePolicy`` delegates
    to it, so both give the same settings.
    """

    def __init__(self, eps_cfg: Mapping[str, Any], owner: str = 'EpsCommandMode') -> None:
        missing = [k for k in ('start', 'end', 'decay') if k not in eps_cfg]
        if missing:
            raise KeyError(f"{owner}: policy.other.eps needs 'start', 'end' and 'decay', missing {missing}")
        self._owner = owner
        self.epsilon_greedy = get_epsilon_greedy_fn(
            eps_cfg['start'], eps_cfg['end'], eps_cfg['decay'], eps_cfg.get('type', 'exp')
        )

    def get_setting_collect(self, command_info: Mapping[str, Any]) -> dict[str, float]:
        """``command_info``: ``{'learner_step': int, 'envstep': int}``; the schedule runs on ``envstep``
        (``step`` is accepted too)."""
        if 'envstep' in command_info:
            step = command_info['envstep']
        elif 'step' in command_info:
            step = command_info['step']
        else:
            raise KeyError(
                f"{self._owner}.get_setting_collect: command_info needs 'envstep', got keys {sorted(command_info)}"
            )
        return {'eps': self.epsilon_greedy(step)}

    def get_setting_learn(self, command_info: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def get_setting_eval(self, command_info: Mapping[str, Any]) -> dict[str, Any]:
        return {}
