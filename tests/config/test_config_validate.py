"""validate_config: typos, wrong types and out-of-range values are caught before any work starts."""

import os
import re

import pytest
from easydict import EasyDict

from ding.config import ConfigError, compile_config, deep_merge_dicts, validate_config
from ding.config.bounds import BOUNDS, CHOICES
from ding.utils.pytorch_ddp_dist_helper import GRAD_SYNC_DTYPES
from ding.worker import BaseLearner
from tests.helpers.config_toys import TOY_CREATE, ToyDQNPolicy, ToyEnvManager, ToyLearner, toy_main
from tests.helpers.processes import ROOT


def toy_defaults():
    """The defaults tree compile_config builds for the toy DQN components."""
    policy = ToyDQNPolicy.default_config()
    policy.learn.learner = ToyLearner.default_config()
    policy.eval.evaluator = EasyDict(eval_freq=1000, n_episode=3, stop_value=1e10)
    return EasyDict(env=dict(manager=ToyEnvManager.default_config(), stop_value=int(1e10)), policy=policy)


def problems_of(cfg, defaults=None):
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, toy_defaults() if defaults is None else defaults)
    return str(info.value)


def test_a_good_config_passes():
    validate_config(toy_main(), toy_defaults())


def test_the_console_key_takes_a_console_level():
    for level in ('quiet', 'normal', 'verbose'):
        validate_config(EasyDict(toy_main(), console=level), toy_defaults())
    msg = problems_of(EasyDict(toy_main(), console='loud'))
    assert "console must be one of ['quiet', 'normal', 'verbose'], got 'loud'" in msg


def test_typo_names_the_full_key_path_and_the_closest_keys():
    msg = problems_of(toy_main(learn=dict(batch_size=32, learning_rat=0.01)))
    assert 'policy.learn.learning_rat' in msg
    assert "did you mean 'learning_rate'" in msg
    assert isinstance(ConfigError('x'), ValueError)


def test_typos_are_found_in_sub_configs_and_env_manager():
    cfg = toy_main(learn=dict(learner=dict(hook=dict(save_ckpt_afer_iter=10))))
    cfg['env']['manager'] = dict(max_retyr=3)
    cfg['policy']['other']['replay_bufer'] = dict(replay_buffer_size=10)
    msg = problems_of(cfg)
    assert 'policy.learn.learner.hook.save_ckpt_afer_iter' in msg and "'save_ckpt_after_iter'" in msg
    assert 'env.manager.max_retyr' in msg and "'max_retry'" in msg
    assert 'policy.other.replay_bufer' in msg and "'replay_buffer'" in msg
    assert '3 problems' in msg  # everything reported at once


def test_env_and_model_sections_are_free_form():
    cfg = toy_main(model=dict(obs_shape=[4, 84, 84], any_model_kwarg=True))
    cfg['env'].update(map_name='maze', frame_skip=4, custom=dict(anything=1))
    validate_config(cfg, toy_defaults())


def test_wrong_types_name_the_key_and_what_was_expected():
    msg = problems_of(toy_main(learn=dict(batch_size='64'), cuda='yes'))
    assert re.search(r"policy.learn.batch_size: expected an integer .*got str '64'", msg)
    assert re.search(r"policy.cuda: expected True or False .*got str 'yes'", msg)
    assert 'policy.learn: expected a dict' in problems_of(toy_main(learn=5))


def test_int_for_float_and_integral_float_for_int_are_fine():
    validate_config(toy_main(learn=dict(learning_rate=1, batch_size=32.0)), toy_defaults())
    assert 'expected an integer' in problems_of(toy_main(learn=dict(batch_size=32.5)))


BAD_VALUES = [
    ('policy.learn.learning_rate', 0, 'must be > 0'),
    ('policy.learn.batch_size', 0, 'must be >= 1'),
    ('policy.learn.update_per_collect', 0, 'must be >= 1'),
    ('policy.collect.n_sample', -1, 'must be >= 1'),
    ('policy.discount_factor', 1.5, r'must be in \(0, 1\]'),
    ('policy.discount_factor', 0, r'must be in \(0, 1\]'),
    ('policy.nstep', 0, 'must be >= 1'),
    ('policy.other.replay_buffer.replay_buffer_size', 0, 'must be >= 1'),
    ('policy.eval.evaluator.eval_freq', -5, 'must be >= 0'),
    ('env.collector_env_num', 0, 'must be >= 1'),
    ('env.evaluator_env_num', 0, 'must be >= 1'),
    ('policy.other.eps.start', 1.2, r'must be in \[0, 1\]'),
    ('policy.other.eps.end', -0.1, r'must be in \[0, 1\]'),
    ('policy.learn.target_update_freq', 0, 'must be >= 1'),
    ('policy.learn.target_theta', 0.0, r'must be in \(0, 1\]'),
]


@pytest.mark.parametrize('path,value,bound', BAD_VALUES)
def test_out_of_range_values_name_the_key_and_the_bound(path, value, bound):
    cfg = deep_merge_dicts(toy_main(), _nested(path, value))
    defaults = toy_defaults()
    defaults.policy.learn.target_theta = 0.005
    msg = problems_of(cfg, defaults)
    assert re.search(re.escape(path) + r' = \w+ .* is out of range: ' + bound, msg), msg


def test_ppo_style_bounds_and_numbers_in_free_form_env():
    defaults = toy_defaults()
    defaults.policy.collect.gae_lambda = 0.95
    defaults.policy.learn.update(clip_ratio=0.2, entropy_weight=0.01, value_weight=0.5)
    cfg = toy_main(
        collect=dict(n_sample=16, gae_lambda=1.01),
        learn=dict(batch_size=8, clip_ratio=-0.2, entropy_weight=-1, value_weight=-0.5),
    )
    msg = problems_of(cfg, defaults)
    for key in ('gae_lambda', 'clip_ratio', 'entropy_weight', 'value_weight'):
        assert key in msg
    # env is free-form, but keys of the bounds table must still be numbers there
    msg = problems_of(deep_merge_dicts(toy_main(), {'env': {'evaluator_env_num': 'x'}}))
    assert "env.evaluator_env_num: expected an integer, got str 'x'" in msg


def test_model_kwargs_are_not_bounds_checked():
    validate_config(toy_main(model=dict(batch_size=0)), toy_defaults())


def test_on_policy_minibatch_must_not_exceed_the_rollout():
    defaults = toy_defaults()
    defaults.policy.on_policy = True
    msg = problems_of(toy_main(learn=dict(batch_size=256), collect=dict(n_sample=64)), defaults)
    assert 'policy.learn.batch_size = int 256 must not exceed policy.collect.n_sample = int 64' in msg
    validate_config(toy_main(learn=dict(batch_size=64), collect=dict(n_sample=64)), defaults)
    defaults.policy.on_policy = False  # off-policy: the batch comes from the replay buffer
    validate_config(toy_main(learn=dict(batch_size=256), collect=dict(n_sample=64)), defaults)


def test_escape_hatches_for_unknown_keys():
    typo = toy_main(learn=dict(my_research_flag=True))
    with pytest.raises(ConfigError):
        validate_config(typo, toy_defaults())
    validate_config(dict(typo, allow_unknown_keys=True), toy_defaults())  # whole config
    per_section = toy_main(learn=dict(my_research_flag=True, allow_unknown_keys=True))
    validate_config(per_section, toy_defaults())  # just that section (and below)
    validate_config(typo, toy_defaults(), allow_unknown_keys=True)
    # bounds still apply with the hatch open
    with pytest.raises(ConfigError, match='learning_rate'):
        validate_config(toy_main(learn=dict(learning_rate=-1, allow_unknown_keys=True)), toy_defaults())
    with pytest.raises(ConfigError, match='allow_unknown_keys: expected True or False'):
        validate_config(toy_main(learn=dict(allow_unknown_keys='yes')), toy_defaults())


def test_env_var_opens_the_hatch_in_compile_config(monkeypatch):
    import tests.helpers.config_toys  # noqa: F401 - registers the toy components

    cfg = toy_main(learn=dict(my_research_flag=True))
    with pytest.raises(ConfigError, match='my_research_flag'):
        compile_config(cfg, auto=True, create_cfg=TOY_CREATE, save_cfg=False)
    monkeypatch.setenv('DING_ALLOW_UNKNOWN_KEYS', '1')
    compiled = compile_config(cfg, auto=True, create_cfg=TOY_CREATE, save_cfg=False)
    assert compiled.policy.learn.my_research_flag is True


def test_docs_list_every_bound():
    with open(os.path.join(ROOT, 'docs', 'config.md')) as f:
        docs = f.read()
    missing = [key for key in BOUNDS if f'`{key}`' not in docs]
    assert missing == [], f'docs/config.md does not document the bounds of {missing}'


def _nested(path, value):
    out = value
    for part in reversed(path.split('.')):
        out = {part: out}
    return out


def test_the_learner_checkpoint_section_is_checked_key_by_key():
    defaults = EasyDict(policy=dict(learn=dict(learner=BaseLearner.default_config())))
    bad = dict(
        ckpt_uri='ftp://host/ckpt',
        every_env_steps=0,
        keep_n=0,
        compression='lz4',
        on_stall='wait',
        max_parallel=100,
        upload_retires=3,
    )
    text = problems_of(EasyDict(policy=dict(learn=dict(learner=dict(checkpoint=bad)))), defaults)
    for expected in (
        "policy.learn.learner.checkpoint.ckpt_uri: unsupported URL scheme 'ftp'",
        'policy.learn.learner.checkpoint.every_env_steps = int 0 is out of range',
        'policy.learn.learner.checkpoint.keep_n = int 0 is out of range',
        "policy.learn.learner.checkpoint.compression = str 'lz4' is not one of [None, 'zstd']",
        "policy.learn.learner.checkpoint.on_stall = str 'wait' is not one of ['continue', 'pause']",
        'policy.learn.learner.checkpoint.max_parallel = int 100 is out of range',
        "unknown key 'upload_retires'",
    ):
        assert expected in text, (expected, text)
    good = dict(
        ckpt_uri='s3://bucket/run', every_minutes=0.5, compression='zstd', storage_options={'endpoint_url': 'x'}
    )
    validate_config(EasyDict(policy=dict(learn=dict(learner=dict(checkpoint=good)))), defaults)


def test_the_gradient_sync_settings_of_data_parallel_learners_are_checked_by_value_and_type():
    for dtype in (None, 'bfloat16', 'float16'):
        cfg = toy_main(learn=dict(batch_size=32, grad_sync_dtype=dtype, overlap_gradient_sync=True))
        validate_config(cfg, toy_defaults())  # known in the strict policy.learn
    msg = problems_of(toy_main(learn=dict(batch_size=32, grad_sync_dtype='bf16', overlap_gradient_sync=1)))
    assert "policy.learn.grad_sync_dtype = str 'bf16' is not one of [None, 'bfloat16', 'float16']" in msg
    assert 'policy.learn.overlap_gradient_sync = int 1 is not one of [False, True]' in msg
    # the names the config accepts are those the gradient averaging knows
    assert CHOICES['learn.grad_sync_dtype'] == (None, *GRAD_SYNC_DTYPES)
