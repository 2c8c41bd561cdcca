"""RL maths: TD targets, GAE, PPO / A2C losses, exploration schedules, sample builders."""
from .td import (
    q_1step_td_data, q_1step_td_error, q_nstep_td_data, q_nstep_td_error, q_nstep_td_target, nstep_return_data,
    nstep_return, v_1step_td_data, v_1step_td_error
)
from .gae import gae_data, gae
from .ppo import (
    ppo_data, ppo_loss, ppo_info, ppo_error, ppo_error_continuous, ppo_policy_data, ppo_policy_error,
    ppo_value_data, ppo_value_error
)
from .a2c import a2c_data, a2c_loss, a2c_error, a2c_error_continuous
from .exploration import get_epsilon_greedy_fn
from .adder import get_nstep_return_data, get_train_sample
from .distribution import categorical_logp_entropy, gaussian_logp_entropy
from .running_mean_std import RunningMeanStd
