"""Small, real configurable components for the config tests, registered under 'cfgtest_*' names.

Each has what compile_config relies on: a class-level ``config`` dict and ``default_config()``.
"""

import copy

from easydict import EasyDict

from ding.utils.registry import (
    BUFFER_REGISTRY,
    COMMANDER_REGISTRY,
    ENV_MANAGER_REGISTRY,
    ENV_REGISTRY,
    LEARNER_REGISTRY,
    POLICY_REGISTRY,
    SERIAL_COLLECTOR_REGISTRY,
    SERIAL_EVALUATOR_REGISTRY,
)


class Configurable:
    config: dict = {}

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg


@ENV_REGISTRY.register('cfgtest_grid')
class GridEnv(Configurable):
    config = dict(size=5, max_steps=50, collector_env_num=2, evaluator_env_num=1)


@ENV_MANAGER_REGISTRY.register('cfgtest_manager')
class ToyEnvManager(Configurable):
    config = dict(episode_num=float('inf'), max_retry=2, step_timeout=None, auto_reset=True)


@POLICY_REGISTRY.register('cfgtest_dqn')
class ToyDQNPolicy(Configurable):
    config = dict(
        type='cfgtest_dqn',
        cuda=False,
        on_policy=False,
        priority=False,
        discount_factor=0.99,
        nstep=1,
        model=dict(),
        learn=dict(update_per_collect=3, batch_size=64, learning_rate=0.001, target_update_freq=100, ignore_done=False),
        collect=dict(n_sample=8, unroll_len=1),
        eval=dict(),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
            replay_buffer=dict(replay_buffer_size=10000),
        ),
    )


@POLICY_REGISTRY.register('cfgtest_ppo')
class ToyPPOPolicy(Configurable):
    config = dict(
        type='cfgtest_ppo',
        cuda=False,
        on_policy=True,
        model=dict(),
        learn=dict(
            epoch_per_collect=2,
            batch_size=64,
            learning_rate=3e-4,
            value_weight=0.5,
            entropy_weight=0.01,
            clip_ratio=0.2,
        ),
        collect=dict(
            n_sample=128, unroll_len=1, discount_factor=0.99, gae_lambda=0.95, collector=dict(type='cfgtest_episode')
        ),
        eval=dict(),
        other=dict(),
    )


@LEARNER_REGISTRY.register('cfgtest_learner')
class ToyLearner(Configurable):
    config = dict(
        train_iterations=int(1e9),
        dataloader=dict(num_workers=0),
        hook=dict(save_ckpt_after_iter=1000, log_show_after_iter=100, load_ckpt_before_run=''),
    )


@SERIAL_COLLECTOR_REGISTRY.register('cfgtest_sample')
class ToySampleCollector(Configurable):
    config = dict(deepcopy_obs=False, transform_obs=False, collect_print_freq=100)


@SERIAL_COLLECTOR_REGISTRY.register('cfgtest_episode')
class ToyEpisodeCollector(Configurable):
    config = dict(deepcopy_obs=False, get_train_sample=True, collect_print_freq=100)


@SERIAL_EVALUATOR_REGISTRY.register('cfgtest_eval')
class ToyEvaluator(Configurable):
    config = dict(eval_freq=1000, n_episode=3, stop_value=1e10, render=dict(render_freq=-1, mode='train_iter'))


@BUFFER_REGISTRY.register('cfgtest_buffer')
class ToyBuffer(Configurable):
    config = dict(replay_buffer_size=4096, max_use=float('inf'), deepcopy=False)


@COMMANDER_REGISTRY.register('cfgtest_commander')
class ToyCommander(Configurable):
    config = dict(log_every=10)


# What a config file pairs with main_config when it uses the toy components.
TOY_CREATE = dict(
    env=dict(type='cfgtest_grid'),
    env_manager=dict(type='cfgtest_manager'),
    policy=dict(type='cfgtest_dqn'),
    learner=dict(type='cfgtest_learner'),
    collector=dict(type='cfgtest_sample'),
    evaluator=dict(type='cfgtest_eval'),
    replay_buffer=dict(type='cfgtest_buffer'),
    commander=dict(type='cfgtest_commander'),
)


def toy_main(**policy_overrides):
    """A DQN-style main_config for the toy components."""
    policy = dict(
        cuda=False,
        model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[32, 32]),
        learn=dict(batch_size=32, learning_rate=0.01),
        collect=dict(n_sample=16),
        eval=dict(evaluator=dict(eval_freq=50)),
        other=dict(eps=dict(start=1.0, end=0.05), replay_buffer=dict(replay_buffer_size=2000)),
    )
    policy.update(policy_overrides)
    return dict(
        exp_name='toy_exp',
        env=dict(collector_env_num=4, evaluator_env_num=2, n_evaluator_episode=2, stop_value=195, map_name='maze'),
        policy=policy,
    )
