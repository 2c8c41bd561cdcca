"""Hook ordering, hook configs (short and full form) and hook errors, on a real learner."""

import os

import pytest
from easydict import EasyDict

from ding.worker.learner import (
    BaseLearner,
    LearnerHook,
    LoadCkptHook,
    LogReduceHook,
    LogShowHook,
    SaveCkptHook,
    add_learner_hook,
    build_learner_hook_by_cfg,
    create_learner,
    merge_hooks,
    register_learner_hook,
    show_hooks,
)
from tests.helpers.learner_policies import learner_cfg, make_batch, make_policy

LOGS = {}  # named call logs for hooks built from configs (configs are deep-copied)


class RecordHook(LearnerHook):
    """Appends (hook name, position, learner iteration) to a list: ext_args['calls'] or LOGS[ext_args['log']]."""

    def __init__(self, *args, ext_args=None, **kwargs):
        super().__init__(*args, ext_args=ext_args, **kwargs)
        self.calls = ext_args['calls'] if 'calls' in ext_args else LOGS.setdefault(ext_args['log'], [])

    def __call__(self, engine):
        self.calls.append((self.name, self.position, engine.last_iter.val))


register_learner_hook('test_record', RecordHook)


@pytest.fixture
def learner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []

    def make(cfg=None, **kwargs):
        lrn = BaseLearner(cfg if cfg is not None else learner_cfg(), make_policy(), **kwargs)
        made.append(lrn)
        return lrn

    yield make
    for lrn in made:
        lrn.close()


def test_hooks_run_by_priority_then_registration_order(learner):
    lrn = learner()
    calls = []
    for name, prio in [('c30', 30), ('a10', 10), ('b20', 20), ('a10_second', 10), ('zero', 0)]:
        lrn.register_hook(RecordHook(name, prio, position='after_iter', ext_args={'calls': calls}))
    lrn.register_hook(RecordHook('before', 5, 'before_iter', ext_args={'calls': calls}))
    for it in range(2):
        lrn.train(make_batch(it))
    names = [c[0] for c in calls]
    assert names == ['before', 'zero', 'a10', 'a10_second', 'b20', 'c30'] * 2
    # before_iter and after_iter hooks both see the iteration number before it advances.
    assert [c[2] for c in calls] == [0] * 6 + [1] * 6
    assert lrn.train_iter == 2 and lrn.last_iter.val == 2


def test_run_hooks_and_call_hook_errors(learner):
    lrn = learner()
    calls = []
    lrn.register_hook(RecordHook('start', 1, position='before_run', ext_args={'calls': calls}))
    lrn.register_hook(RecordHook('end', 1, position='after_run', ext_args={'calls': calls}))
    lrn.call_hook('before_run')
    lrn.train(make_batch(0))
    lrn.call_hook('after_run')
    assert calls == [('start', 'before_run', 0), ('end', 'after_run', 1)]
    with pytest.raises(ValueError, match="'after_everything'"):
        lrn.call_hook('after_everything')


def test_bad_priority_and_position_raise_naming_them():
    with pytest.raises(ValueError, match="'neg'.*>= 0"):
        RecordHook('neg', -1, position='after_iter', ext_args={'calls': []})
    with pytest.raises(ValueError, match="'nan_prio'"):
        RecordHook('nan_prio', float('nan'), position='after_iter', ext_args={'calls': []})
    with pytest.raises(ValueError, match="'after_lunch'"):
        RecordHook('h', 1, position='after_lunch', ext_args={'calls': []})
    with pytest.raises(ValueError, match='position None'):
        RecordHook('h', 1, ext_args={'calls': []})
    # The same checks apply to hooks built from a config.
    with pytest.raises(ValueError, match="'my_hook'.*>= 0"):
        build_learner_hook_by_cfg({'my_hook': dict(type='save_ckpt', position='after_iter', priority=-3)})
    with pytest.raises(ValueError, match="'sometime'"):
        build_learner_hook_by_cfg({'my_hook': dict(type='save_ckpt', position='sometime')})


def test_bad_hook_configs_name_the_key():
    with pytest.raises(ValueError, match="unknown key 'save_ckpt_every'"):
        build_learner_hook_by_cfg({'save_ckpt_every': 100})
    with pytest.raises(ValueError, match="'log_show_after_iter'.*positive integer"):
        build_learner_hook_by_cfg({'log_show_after_iter': -5})
    with pytest.raises(ValueError, match="'x'.*missing field.*position"):
        build_learner_hook_by_cfg({'x': dict(type='save_ckpt')})
    with pytest.raises(ValueError, match="'x'.*unknown type 'save_ckp'.*save_ckpt"):
        build_learner_hook_by_cfg({'x': dict(type='save_ckp', position='after_iter')})
    with pytest.raises(ValueError, match="'x'.*unknown field.*'freq'"):
        build_learner_hook_by_cfg({'x': dict(type='save_ckpt', position='after_iter', freq=3)})
    with pytest.raises(ValueError, match="'save_ckpt_after_run' must be True or False"):
        build_learner_hook_by_cfg({'save_ckpt_after_run': 'yes'})
    with pytest.raises(TypeError, match='not a LearnerHook subclass'):
        register_learner_hook('bad', dict)


def test_short_form_config_builds_the_builtin_hooks():
    hooks = build_learner_hook_by_cfg(
        EasyDict(
            load_ckpt_before_run='./exp/ckpt/iteration_10',
            log_show_after_iter=100,
            save_ckpt_after_iter=1000,
            save_ckpt_after_run=True,
            log_reduce_after_iter=True,
            keep_n=3,
        )
    )
    summary = {pos: [(type(h), h.name, h.priority) for h in hs] for pos, hs in hooks.items()}
    assert summary == {
        'before_run': [(LoadCkptHook, 'load_ckpt', 20)],
        'after_run': [(SaveCkptHook, 'save_ckpt_after_run', 20)],
        'before_iter': [],
        'after_iter': [
            (LogReduceHook, 'log_reduce_after_iter', 10),
            (LogShowHook, 'log_show', 20),
            (SaveCkptHook, 'save_ckpt_after_iter', 20),
        ],
    }
    assert hooks['before_run'][0].load_path == './exp/ckpt/iteration_10'
    assert hooks['after_iter'][1].freq == 100
    assert hooks['after_iter'][2].freq == 1000 and hooks['after_iter'][2].ext_args.keep_n == 3
    # '' / 0 / False switch the hooks off.
    off = build_learner_hook_by_cfg(
        dict(load_ckpt_before_run='', log_show_after_iter=0, save_ckpt_after_iter=0, save_ckpt_after_run=False)
    )
    assert all(hs == [] for hs in off.values())


def test_full_form_config_builds_registered_hooks(learner):
    calls = LOGS['full'] = []
    hook_cfg = dict(
        log_show_after_iter=0,
        save_ckpt_after_iter=0,
        save_ckpt_after_run=False,
        late=dict(name='late', type='test_record', position='after_iter', priority=50, ext_args=dict(log='full')),
        early=dict(type='test_record', position='after_iter', priority=5, ext_args=dict(log='full')),
        save=dict(name='save_every_2', type='save_ckpt', position='after_iter', ext_args=dict(freq=2, keep_n=1)),
        default_prio=dict(type='test_record', position='before_iter', ext_args=dict(log='full')),
    )
    hooks = build_learner_hook_by_cfg(hook_cfg)
    # 'save_every_2' and 'default_prio' name no priority: DI-engine's default, 100.
    assert [(h.name, h.priority) for h in hooks['after_iter']] == [('early', 5), ('late', 50), ('save_every_2', 100)]
    assert hooks['after_iter'][2].freq == 2
    assert [(h.name, h.priority) for h in hooks['before_iter']] == [('default_prio', 100)]
    lrn = learner(dict(hook=hook_cfg))
    lrn.train(make_batch(0))
    assert calls == [('default_prio', 'before_iter', 0), ('early', 'after_iter', 0), ('late', 'after_iter', 0)]
    assert not os.path.exists('default_experiment/ckpt')
    lrn.train(make_batch(1))
    assert sorted(os.listdir('default_experiment/ckpt')) == ['iteration_2.manifest.json', 'iteration_2.safetensors']


def test_add_merge_and_show_hooks(capsys):
    calls = []
    a = {p: [] for p in LearnerHook.positions}
    b = {p: [] for p in LearnerHook.positions}
    add_learner_hook(a, RecordHook('a20', 20, position='after_iter', ext_args={'calls': calls}))
    add_learner_hook(a, RecordHook('a10', 10, position='after_iter', ext_args={'calls': calls}))
    add_learner_hook(b, RecordHook('b10', 10, position='after_iter', ext_args={'calls': calls}))
    add_learner_hook(b, RecordHook('b5', 5, position='after_iter', ext_args={'calls': calls}))
    merged = merge_hooks(a, b)
    assert [h.name for h in merged['after_iter']] == ['b5', 'a10', 'b10', 'a20']
    text = show_hooks(merged)
    assert "after_iter: ['b5(RecordHook, priority=5)', 'a10(RecordHook" in text
    assert capsys.readouterr().out.strip() == text
    with pytest.raises(TypeError, match='not a LearnerHook'):
        add_learner_hook(a, lambda engine: None)
    with pytest.raises(ValueError, match='positions differ'):
        merge_hooks(a, {'after_iter': []})


def test_di_engine_style_custom_hook_works_unchanged(learner):
    """The shape of a hook written for DI-engine: *args/**kwargs passthrough, ext_args consumed by the subclass."""

    class LossWatchHook(LearnerHook):
        def __init__(self, *args, ext_args: EasyDict = EasyDict(), **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._threshold = ext_args['threshold'] if 'threshold' in ext_args else 1e9
            self.seen = []

        def __call__(self, engine: 'BaseLearner') -> None:  # noqa
            loss = engine.log_buffer['scalar']['total_loss']
            self.seen.append((engine.last_iter.val, loss < self._threshold))
            if engine.last_iter.val == 1:
                engine.info(f'loss watch at iteration {engine.last_iter.val}: {loss}')

    lrn = learner()
    hook = LossWatchHook('loss_watch', 15, position='after_iter', ext_args=EasyDict({'threshold': 1e6}))
    lrn.register_hook(hook)
    for it in range(3):
        lrn.train(make_batch(it))
    assert hook.seen == [(0, True), (1, True), (2, True)]


def test_create_learner_and_default_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = BaseLearner.default_config()
    assert cfg.hook == dict(
        load_ckpt_before_run='', log_show_after_iter=100, save_ckpt_after_iter=10000, save_ckpt_after_run=True, keep_n=5
    )
    assert cfg.train_iterations == int(1e9) and cfg.dataloader.num_workers == 0 and cfg.log_policy is True
    cfg.hook.keep_n = 1  # a deep copy: the class defaults stay untouched
    assert BaseLearner.config['hook']['keep_n'] == 5
    lrn = create_learner(EasyDict(dict(learner_cfg(), type='base')), policy=make_policy(), exp_name='made')
    try:
        assert type(lrn) is BaseLearner and lrn.exp_name == 'made'
        # A partial config is completed from the defaults.
        assert lrn.cfg.train_iterations == int(1e9) and lrn.cfg.dataloader.num_workers == 0
    finally:
        lrn.close()
    with pytest.raises(KeyError, match="unknown type 'no_such_learner'"):
        create_learner(EasyDict(type='no_such_learner'))
