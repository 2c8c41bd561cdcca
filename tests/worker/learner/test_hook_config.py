"""Full-form learner hooks in a config file (``policy.learn.learner.hook.<name> = dict(type=..., position=...)``, as
docs/hooks.md shows) are accepted by ``compile_config``, validated (a bad ``position`` or ``type`` is a
``ConfigError`` naming the key), and run by the learner of a real serial run."""

import copy
import os

import pytest

from ding.config import ConfigError, compile_config
from ding.entry import serial_pipeline
from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

CONFIG_FILE = """
import copy
from dizoo.classic_control.cartpole.config.cartpole_dqn_config import create_config, main_config

main_config = copy.deepcopy(main_config)
main_config.exp_name = 'full_form_hooks'
main_config.env.collector_env_num = 2
main_config.env.evaluator_env_num = 1
main_config.env.n_evaluator_episode = 1
main_config.policy.learn.learner = dict(
    hook=dict(
        save_ckpt_after_iter=0,
        save_often=dict(type='save_ckpt', position='after_iter', priority=30, ext_args=dict(freq=2)),
        show_at_end=dict(type='log_show', position='after_run'),
    )
)
"""


def _with_hook(**hook):
    main = copy.deepcopy(main_config)
    main.policy.learn.learner = dict(hook=hook)
    return main


def test_a_config_file_with_full_form_hooks_compiles_and_trains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'hooks_config.py').write_text(CONFIG_FILE)
    serial_pipeline(str(tmp_path / 'hooks_config.py'), seed=0, max_train_iter=4)
    ckpt = tmp_path / 'full_form_hooks' / 'ckpt'
    written = sorted(os.listdir(ckpt))
    assert 'iteration_2.safetensors' in written and 'iteration_4.safetensors' in written


@pytest.mark.parametrize(
    'hook, words',
    [
        (dict(type='save_ckpt', position='after_everything'), ['position', 'after_everything']),
        (dict(type='no_such_hook', position='after_iter'), ['no_such_hook']),
        (dict(type='save_ckpt'), ['missing', 'position']),
        (dict(type='save_ckpt', position='after_iter', freq=3), ['unknown field', 'freq']),
        (dict(type='save_ckpt', position='after_iter', priority=-1), ['priority']),
    ],
)
def test_a_bad_full_form_hook_is_a_config_error_naming_the_key(hook, words):
    with pytest.raises(ConfigError) as info:
        compile_config(_with_hook(my_hook=hook), auto=True, create_cfg=create_config, save_cfg=False)
    text = str(info.value)
    assert 'policy.learn.learner.hook.my_hook' in text
    for word in words:
        assert word in text


def test_good_full_form_hooks_pass_validation():
    cfg = compile_config(
        _with_hook(save_often=dict(type='save_ckpt', position='after_iter', ext_args=dict(freq=5))),
        auto=True,
        create_cfg=create_config,
        save_cfg=False,
    )
    assert cfg.policy.learn.learner.hook.save_often.type == 'save_ckpt'
