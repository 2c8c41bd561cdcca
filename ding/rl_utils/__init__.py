"""RL maths: TD targets, GAE, PPO / A2C / V-trace losses, exploration schedules, sample builders.

Names resolve on first use: the exploration schedules need only the standard library, so the parallel
coordinator (which turns env steps into epsilon) can use them without importing torch.
"""

import sys as _sys
import types as _types

from ding.utils.lazy_import import lazy_exports

# name -> submodule defining it
_EXPORTS = {
    **dict.fromkeys(
        (
            'q_1step_td_data',
            'q_1step_td_error',
            'q_nstep_td_data',
            'q_nstep_td_error',
            'q_nstep_td_target',
            'q_nstep_td_error_with_rescale',
            'nstep_return_data',
            'nstep_return',
            'v_1step_td_data',
            'v_1step_td_error',
        ),
        '.td',
    ),
    **dict.fromkeys(
        ('dist_nstep_td_data', 'dist_nstep_td_error', 'qrdqn_nstep_td_data', 'qrdqn_nstep_td_error', 'quantile_huber'),
        '.distributional',
    ),
    **dict.fromkeys(('tanh_gaussian_sample', 'twin_q_target', 'twin_q_loss', 'smooth_target_action'), '.continuous_q'),
    **dict.fromkeys(('gae_data', 'gae'), '.gae'),
    **dict.fromkeys(
        (
            'ppo_data',
            'ppo_loss',
            'ppo_info',
            'ppo_error',
            'ppo_error_continuous',
            'ppo_policy_data',
            'ppo_policy_error',
            'ppo_value_data',
            'ppo_value_error',
        ),
        '.ppo',
    ),
    **dict.fromkeys(('a2c_data', 'a2c_loss', 'a2c_error', 'a2c_error_continuous'), '.a2c'),
    **dict.fromkeys(
        (
            'vtrace_data',
            'vtrace_loss',
            'vtrace_nstep_return',
            'vtrace_advantage',
            'vtrace_targets',
            'vtrace_error_discrete_action',
            'vtrace_error_continuous_action',
        ),
        '.vtrace',
    ),
    **dict.fromkeys(('get_epsilon_greedy_fn', 'EpsCommandMode'), '.exploration'),
    **dict.fromkeys(
        ('get_nstep_return_data', 'get_train_sample', 'get_sequence_train_sample', 'nstep_window'), '.adder'
    ),
    **dict.fromkeys(('categorical_logp_entropy', 'gaussian_logp_entropy'), '.distribution'),
    **dict.fromkeys(('value_transform', 'value_inv_transform'), '.value_rescale'),
    'RunningMeanStd': '.running_mean_std',
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(_types.ModuleType):
    """``gae`` names both a submodule and its function: importing ``ding.rl_utils.gae`` directly must not
    turn the package attribute into the module (the eager package bound the function, so does this one)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, _types.ModuleType) and value.__name__ == f'{self.__name__}.{name}' and name in _EXPORTS:
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
