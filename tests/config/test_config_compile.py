"""compile_config: component defaults merged under the user's config, validated, saved, read back."""

import copy
import importlib.util
import logging
import os
import textwrap

import pytest

from ding.config import ConfigError, compile_config, read_config
from tests.helpers.config_toys import (
    TOY_CREATE,
    ToyBuffer,
    ToyDQNPolicy,
    ToyEnvManager,
    ToyEvaluator,
    ToyLearner,
    ToySampleCollector,
    toy_main,
)
from tests.helpers.processes import ROOT


def test_auto_places_every_default_under_the_users_values():
    main = toy_main()
    main_before = copy.deepcopy(main)
    cfg = compile_config(main, seed=7, auto=True, create_cfg=TOY_CREATE, save_cfg=False)
    assert main == main_before  # the caller's dict is not modified

    # env: env class defaults + user keys + type; manager: env manager defaults + type
    assert cfg.env.type == 'cfgtest_grid' and cfg.env.size == 5 and cfg.env.collector_env_num == 4
    assert cfg.env.map_name == 'maze'
    assert cfg.env.manager.type == 'cfgtest_manager' and cfg.env.manager.max_retry == 2
    # policy: defaults the user did not touch are filled in, user values win
    assert cfg.policy.type == 'cfgtest_dqn'
    assert cfg.policy.learn.batch_size == 32 and cfg.policy.learn.update_per_collect == 3
    assert cfg.policy.other.eps == {'type': 'exp', 'start': 1.0, 'end': 0.05, 'decay': 10000}
    assert cfg.policy.model.encoder_hidden_size_list == [32, 32]
    # component sections
    assert cfg.policy.learn.learner.hook.save_ckpt_after_iter == 1000
    assert (
        cfg.policy.collect.collector.type == 'cfgtest_sample' and cfg.policy.collect.collector.collect_print_freq == 100
    )
    assert cfg.policy.eval.evaluator.eval_freq == 50
    assert cfg.policy.other.replay_buffer.type == 'cfgtest_buffer'
    assert cfg.policy.other.replay_buffer.replay_buffer_size == 2000  # user > policy default (10000) > buffer (4096)
    assert cfg.policy.other.replay_buffer.max_use == float('inf')
    assert cfg.policy.other.commander.log_every == 10
    # propagated values
    assert cfg.seed == 7 and cfg.exp_name == 'toy_exp'
    assert cfg.policy.eval.evaluator.stop_value == 195 and cfg.policy.eval.evaluator.n_episode == 2


def test_auto_defaults_for_collector_buffer_and_exp_name():
    create = {k: v for k, v in TOY_CREATE.items() if k not in ('collector', 'replay_buffer')}
    create['policy'] = dict(type='cfgtest_ppo')
    create['replay_buffer'] = dict(type='cfgtest_buffer')
    main = toy_main(learn=dict(batch_size=32), collect=dict(n_sample=64), other=dict())
    del main['exp_name']
    cfg = compile_config(main, auto=True, create_cfg=create, save_cfg=False)
    # the policy's default collect.collector.type picks the collector
    assert cfg.policy.collect.collector.type == 'cfgtest_episode'
    assert cfg.policy.collect.collector.get_train_sample is True
    assert cfg.exp_name == 'default_experiment' and cfg.seed == 0
    assert cfg.policy.on_policy is True and cfg.policy.collect.gae_lambda == 0.95


def test_import_names_are_imported_before_lookup(tmp_path, monkeypatch):
    (tmp_path / 'cfgtest_plugin_env.py').write_text(
        textwrap.dedent("""
        from ding.utils.registry import ENV_REGISTRY

        @ENV_REGISTRY.register('cfgtest_plugin')
        class PluginEnv:
            @classmethod
            def default_config(cls):
                return dict(difficulty=3)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__('sys').modules, 'cfgtest_plugin_env', raising=False)
    create = dict(TOY_CREATE, env=dict(type='cfgtest_plugin', import_names=['cfgtest_plugin_env']))
    cfg = compile_config(toy_main(), auto=True, create_cfg=create, save_cfg=False)
    assert cfg.env.difficulty == 3 and cfg.env.import_names == ['cfgtest_plugin_env']
    bad = dict(TOY_CREATE, env=dict(type='cfgtest_plugin', import_names=['cfgtest_no_such_module']))
    with pytest.raises(ConfigError, match=r"create_config.env.import_names: cannot import 'cfgtest_no_such_module'"):
        compile_config(toy_main(), auto=True, create_cfg=bad, save_cfg=False)


def test_unknown_type_in_create_config_is_a_clear_error():
    create = dict(TOY_CREATE, policy=dict(type='cfgtest_dqm'))
    with pytest.raises(ConfigError, match=r"create_config.policy.type: .*'cfgtest_dqm'.*cfgtest_dqn"):
        compile_config(toy_main(), auto=True, create_cfg=create, save_cfg=False)
    with pytest.raises(ConfigError, match='needs create_cfg'):
        compile_config(toy_main(), auto=True, save_cfg=False)


def test_manual_mode_uses_the_classes_passed_in():
    cfg = compile_config(
        toy_main(),
        env_manager=ToyEnvManager,
        policy=ToyDQNPolicy,
        learner=ToyLearner,
        collector=ToySampleCollector,
        evaluator=ToyEvaluator,
        buffer=ToyBuffer,
        save_cfg=False,
    )
    assert cfg.env.manager.max_retry == 2 and cfg.env.manager.type == 'cfgtest_manager'  # type from the registry
    assert cfg.policy.learn.learner.dataloader.num_workers == 0
    assert cfg.policy.collect.collector.deepcopy_obs is False
    assert cfg.policy.eval.evaluator.stop_value == 195  # env.stop_value wins over the evaluator default
    assert cfg.policy.other.replay_buffer.max_use == float('inf')
    # no evaluator: no evaluator defaults and no propagation
    cfg = compile_config(
        toy_main(), env_manager=ToyEnvManager, policy=ToyDQNPolicy, learner=ToyLearner, evaluator=None, save_cfg=False
    )
    assert cfg.policy.eval.evaluator == {'eval_freq': 50}


def test_reward_model_defaults_and_cuda(caplog):
    class ToyRewardModel:
        @classmethod
        def default_config(cls):
            return dict(update_per_collect=10, batch_size=32)

    main = toy_main(cuda=True)
    main['reward_model'] = dict(batch_size=16)
    with caplog.at_level(logging.WARNING, logger='ding.config'):
        cfg = compile_config(
            main,
            env_manager=ToyEnvManager,
            policy=ToyDQNPolicy,
            learner=ToyLearner,
            evaluator=ToyEvaluator,
            reward_model=ToyRewardModel,
            save_cfg=False,
        )
    assert cfg.reward_model == {'update_per_collect': 10, 'batch_size': 16, 'cuda': True}
    import torch

    assert ('no CUDA device' in caplog.text) == (not torch.cuda.is_available())


def test_validation_runs_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"policy.learn.learning_rat\b.*'learning_rate'"):
        compile_config(toy_main(learn=dict(learning_rat=0.1)), auto=True, create_cfg=TOY_CREATE)
    assert os.listdir(tmp_path) == []


def test_integral_floats_become_ints():
    main = toy_main(other=dict(replay_buffer=dict(replay_buffer_size=1e5), eps=dict(decay=1e4)))
    cfg = compile_config(main, auto=True, create_cfg=TOY_CREATE, save_cfg=False)
    assert cfg.policy.other.replay_buffer.replay_buffer_size == 100000
    assert type(cfg.policy.other.replay_buffer.replay_buffer_size) is int and type(cfg.policy.other.eps.decay) is int


def test_saved_config_reads_back_and_recompiles_to_the_same(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compile_config(toy_main(), seed=3, auto=True, create_cfg=TOY_CREATE)
    path = tmp_path / 'toy_exp' / 'total_config.py'
    text = path.read_text()
    assert 'exp_config = {' in text and 'main_config = exp_config' in text and 'create_config = {' in text
    assert "float('inf')" in text
    main, create, _ = read_config(str(path))
    assert main == cfg
    assert create.policy.type == 'cfgtest_dqn' and create.replay_buffer.type == 'cfgtest_buffer'
    again = compile_config(main, seed=3, auto=True, create_cfg=create, save_cfg=False)
    assert again == cfg


def test_saved_create_config_drops_the_command_suffix(tmp_path, monkeypatch):
    # serial pipelines compile with policy type '<name>_command'; the file must hold '<name>'
    from ding.utils.registry import POLICY_REGISTRY

    POLICY_REGISTRY.register('cfgtest_dqn_command', ToyDQNPolicy)
    monkeypatch.chdir(tmp_path)
    create = dict(TOY_CREATE, policy=dict(type='cfgtest_dqn_command'))
    cfg = compile_config(toy_main(), auto=True, create_cfg=create)
    assert cfg.policy.type == 'cfgtest_dqn_command'
    _, saved_create, _ = read_config(str(tmp_path / 'toy_exp' / 'total_config.py'))
    assert saved_create.policy.type == 'cfgtest_dqn'


def test_existing_experiment_directory_is_renewed(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    first = compile_config(toy_main(), auto=True, create_cfg=TOY_CREATE)
    assert first.exp_name == 'toy_exp'
    with caplog.at_level(logging.WARNING, logger='ding.config'):
        second = compile_config(toy_main(), auto=True, create_cfg=TOY_CREATE)
    assert second.exp_name.startswith('toy_exp_') and len(second.exp_name) == len('toy_exp_YYmmdd_HHMMSS')
    assert (tmp_path / second.exp_name / 'total_config.py').is_file()
    assert second.exp_name in caplog.text and 'already exists' in caplog.text
    third = compile_config(toy_main(), auto=True, create_cfg=TOY_CREATE)  # same second: still a new directory
    assert third.exp_name not in ('toy_exp', second.exp_name)
    kept = compile_config(toy_main(), auto=True, create_cfg=TOY_CREATE, renew_dir=False, save_path='again.py')
    assert kept.exp_name == 'toy_exp' and (tmp_path / 'toy_exp' / 'again.py').is_file()


# ---- the real components, once they have landed -----------------------------------------------------
REAL_MODULES = [
    'ding.envs.env_manager.base_env_manager',
    'ding.worker.learner.base_learner',
    'ding.worker.collector.sample_serial_collector',
    'ding.worker.collector.interaction_serial_evaluator',
    'ding.worker.replay_buffer.naive_buffer',
    'ding.worker.coordinator.base_serial_commander',
    'dizoo.classic_control.cartpole.envs.cartpole_env',
]


def _missing(modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(
    bool(_missing(REAL_MODULES + ['ding.policy.dqn'])),
    reason=f'real components not written yet: {_missing(REAL_MODULES + ["ding.policy.dqn"])}',
)
def test_real_cartpole_dqn_config_compiles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main, create, _ = read_config(os.path.join(ROOT, 'dizoo/classic_control/cartpole/config/cartpole_dqn_config.py'))
    cfg = compile_config(main, seed=0, auto=True, create_cfg=create)
    assert cfg.policy.type == 'dqn' and cfg.env.type == 'cartpole' and cfg.env.manager.type == 'base'
    assert cfg.policy.other.replay_buffer.type == 'deque' and cfg.policy.collect.collector.type == 'sample'
    assert cfg.policy.eval.evaluator.stop_value == 195 and cfg.policy.eval.evaluator.eval_freq == 40
    assert cfg.policy.learn.learner.hook.save_ckpt_after_iter > 0
    saved, saved_create, _ = read_config(str(tmp_path / 'cartpole_dqn_seed0' / 'total_config.py'))
    assert saved == cfg and saved_create.policy.type == 'dqn'


@pytest.mark.parametrize('algo', ['ppo', 'a2c'])
def test_real_cartpole_on_policy_configs_compile(algo, tmp_path, monkeypatch):
    missing = _missing(REAL_MODULES + [f'ding.policy.{algo}'])
    if missing:
        pytest.skip(f'real components not written yet: {missing}')
    monkeypatch.chdir(tmp_path)
    main, create, _ = read_config(
        os.path.join(ROOT, f'dizoo/classic_control/cartpole/config/cartpole_{algo}_config.py')
    )
    cfg = compile_config(main, seed=0, auto=True, create_cfg=create, save_cfg=False)
    assert cfg.policy.type == algo and cfg.policy.on_policy is True
    assert cfg.policy.learn.batch_size <= cfg.policy.collect.n_sample
