"""The tunable settings a training run offers to ``/run/tune``, registered through one path.

Every function here takes a ``TunableRegistry``: pass the run's ``ServiceRuntime`` so each key also gets
its ``learner_hyperparameter{key}`` gauge (``ServiceRuntime.register_tunable``); a bare ``RunControl``
(the primitive) registers the key without a gauge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ding.rl_utils import get_epsilon_greedy_fn
from ding.worker.learner.nan_guard import DEFAULT_OPTIMIZER_NAMES

from .tune_bounds import TuneCheck


class TunableRegistry(Protocol):
    """Anything tunables are registered on: ``ServiceRuntime`` (with the gauge) or ``RunControl``."""

    def register_tunable(
        self, key: str, getter: Callable[[], Any], setter: Callable[[Any], None], check: TuneCheck | None = None
    ) -> None: ...


def register_learning_rate(registry: TunableRegistry, learn_mode: Any, learn_cfg: Any = None) -> list[str]:
    """Make ``learning_rate`` tunable: every param group of the policy's optimizers (also written to
    ``learn_cfg.learning_rate`` when given). Returns the keys registered (none without an optimizer)."""
    optimizers = []
    for name in DEFAULT_OPTIMIZER_NAMES:
        try:
            opt = learn_mode.get_attribute(name)
        except AttributeError:
            continue
        if opt is not None and hasattr(opt, 'param_groups'):
            optimizers.append(opt)
    if not optimizers:
        return []

    def get() -> float:
        return float(optimizers[0].param_groups[0]['lr'])

    def set_(value: float) -> None:
        for opt in optimizers:
            for group in opt.param_groups:
                group['lr'] = float(value)
        if learn_cfg is not None:
            learn_cfg.learning_rate = float(value)

    registry.register_tunable('learning_rate', get, set_)
    return ['learning_rate']


def _has_attribute(learn_mode: Any, name: str) -> bool:
    try:
        learn_mode.get_attribute(name)
        return True
    except AttributeError:
        return False


def register_loss_weights(registry: TunableRegistry, learn_mode: Any, learn_cfg: Any = None) -> list[str]:
    """Make ``entropy_weight`` / ``value_weight`` tunable where the policy keeps them (``policy._entropy_weight``):
    set on the policy (read by its next ``forward``) and in ``learn_cfg``. Returns the keys registered."""
    keys = []
    for key in ('entropy_weight', 'value_weight'):
        if _has_attribute(learn_mode, key):

            def get(key: str = key) -> float:
                return float(learn_mode.get_attribute(key))

            def set_(value: float, key: str = key) -> None:
                learn_mode.set_attribute(key, float(value))
                if learn_cfg is not None:
                    learn_cfg[key] = float(value)

            registry.register_tunable(key, get, set_)
            keys.append(key)
    return keys


def register_batch_size_attribute(
    registry: TunableRegistry,
    learn_mode: Any,
    learn_cfg: Any = None,
    check: TuneCheck | None = None,
) -> None:
    """Make ``batch_size`` tunable as the policy's attribute (on-policy minibatch size; in parallel mode the
    comm learner's data demand reads it for every batch it asks for)."""

    def set_batch(value: int) -> None:
        learn_mode.set_attribute('batch_size', int(value))
        if learn_cfg is not None:
            learn_cfg['batch_size'] = int(value)

    registry.register_tunable('batch_size', lambda: int(learn_mode.get_attribute('batch_size')), set_batch, check)


def register_serial_tunables(registry: TunableRegistry, cfg: Any, policy: Any, with_buffer: bool) -> None:
    """The keys a serial pipeline can change between iterations, for this policy."""
    learn_cfg = cfg.policy.learn
    learn_mode = policy.learn_mode
    register_loss_weights(registry, learn_mode, learn_cfg)

    if with_buffer:
        # The off-policy loop reads both from the config at the top of every collect.
        buffer_size = cfg.policy.other.replay_buffer.get('replay_buffer_size')

        def check_batch(value: int, pending: Mapping[str, Any]) -> str | None:
            if isinstance(buffer_size, int) and value > buffer_size:
                return (
                    f'batch_size = {value} must not exceed policy.other.replay_buffer.replay_buffer_size = '
                    f'{buffer_size}'
                )
            return None

        registry.register_tunable(
            'update_per_collect',
            lambda: int(learn_cfg.update_per_collect),
            lambda v: learn_cfg.__setitem__('update_per_collect', int(v)),
        )
        registry.register_tunable(
            'batch_size',
            lambda: int(learn_cfg.batch_size),
            lambda v: learn_cfg.__setitem__('batch_size', int(v)),
            check_batch,
        )
    elif _has_attribute(learn_mode, 'batch_size'):
        n_sample = cfg.policy.collect.get('n_sample')

        def check_minibatch(value: int, pending: Mapping[str, Any]) -> str | None:
            if isinstance(n_sample, int) and value > n_sample:
                return f'batch_size = {value} must not exceed policy.collect.n_sample = {n_sample} (on-policy)'
            return None

        register_batch_size_attribute(registry, learn_mode, learn_cfg, check_minibatch)

    eps_cfg = cfg.policy.get('other', {}).get('eps')
    if eps_cfg is not None and hasattr(policy, 'epsilon_greedy'):

        def check_eps(value: Any, pending: Mapping[str, Any]) -> str | None:
            start = pending.get('eps.start', eps_cfg.start)
            end = pending.get('eps.end', eps_cfg.end)
            if end > start:
                return f'eps.end = {end} must not exceed eps.start = {start}'
            return None

        def setter(field: str) -> Callable[[Any], None]:
            def set_(value: Any) -> None:
                eps_cfg[field] = value
                fn = get_epsilon_greedy_fn(eps_cfg.start, eps_cfg.end, eps_cfg.decay, eps_cfg.type)
                policy.epsilon_greedy = fn  # the commander's schedule: the serial collector gets eps from it

            return set_

        def getter(field: str) -> Callable[[], Any]:
            return lambda: eps_cfg[field]

        for field in ('start', 'end', 'decay'):
            registry.register_tunable(
                f'eps.{field}',
                getter(field),
                setter(field),
                check_eps if field in ('start', 'end') else None,
            )


__all__ = [
    'TunableRegistry',
    'register_learning_rate',
    'register_loss_weights',
    'register_batch_size_attribute',
    'register_serial_tunables',
]
