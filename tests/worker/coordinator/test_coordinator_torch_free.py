"""The coordinator process of the parallel pipeline never imports torch (about 220 MB resident saved).

The first test runs, in a fresh interpreter, what ``ding -m parallel`` runs in its main process before and
around the coordinator: config preparation (``prepare_run``: its compile goes to a child interpreter), the
coordinator with its commander (epsilon from the command mode), a replay buffer with sample metadata and the
sample-file clean-up; then asserts torch was never imported. The real CLI runs of
tests/entry/test_parallel_storage_faults.py check that the main process never maps libtorch, from start to end.
"""

import math
import os
import subprocess
import sys
import textwrap

import pytest
from easydict import EasyDict

from ding.policy import create_policy
from ding.worker.coordinator.base_parallel_commander import BUILTIN_COMMAND_MODES, command_policy
from tests.helpers.processes import ROOT, child_env

CONFIG = os.path.join(ROOT, 'dizoo', 'classic_control', 'cartpole', 'config', 'parallel', 'cartpole_dqn_config.py')

COORDINATOR_PROCESS = textwrap.dedent(f"""
    import os, sys
    from ding.config.loader import read_config
    from ding.entry.parallel_entry import parallel_pipeline  # what the CLI imports for -m parallel
    from ding.entry.parallel_prepare import prepare_run
    from ding.worker.coordinator.coordinator import Coordinator

    main, create, system = read_config({CONFIG!r})
    cfg, resume_path = prepare_run(main, create, system, seed=0, resume=None)
    assert resume_path is None and os.path.isfile('./cartpole_dqn_parallel/total_config.py')
    coordinator = Coordinator(cfg)
    commander = coordinator.commander
    learner_task = commander.get_learner_task()
    commander.load_state_dict({{'total_collector_env_step': 5000}})
    collector_task = commander.get_collector_task()
    # linear schedule 0.95 -> 0.1 over 10000 env steps: half-way
    assert abs(collector_task['policy_kwargs']['eps'] - 0.525) < 1e-9, collector_task
    buffer = coordinator.data_plane.create_buffer(learner_task)  # what the assign thread makes for a learner task
    buffer.push([{{'data_id': f'chunk_0#{{i}}', 'collect_iter': 0, 'priority': 1.0}} for i in range(64)])
    assert len(buffer.sample(32, 0)) == 32 and len(buffer.stored_data()) == 64
    assert coordinator.collect_data_garbage(min_age=0.0) == 0
    buffer.close()
    coordinator.close()
    assert 'torch' not in sys.modules, 'the coordinator process imported torch'
    print('torch-free')
""")


def test_coordinator_process_never_imports_torch(tmp_path):
    out = subprocess.run(
        [sys.executable, '-c', COORDINATOR_PROCESS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env(OMP_NUM_THREADS='1'),
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'torch-free' in out.stdout


@pytest.mark.parametrize(
    'eps', [dict(type='linear', start=0.95, end=0.1, decay=10000), dict(type='exp', start=1.0, end=0.05, decay=300)]
)
def test_builtin_command_modes_give_the_policy_settings(eps):
    """The torch-free command mode of each built-in ``*_command`` type == its registered policy's."""
    for policy_type in BUILTIN_COMMAND_MODES:
        policy_cfg = EasyDict(type=policy_type, model=dict(obs_shape=4, action_shape=2), other=dict(eps=dict(eps)))
        light = command_policy(EasyDict(policy=policy_cfg))
        full = create_policy(policy_cfg, enable_field=['command']).command_mode
        assert type(light).__module__.startswith(('ding.rl_utils', 'ding.worker.coordinator')), type(light)
        for envstep in (0, 1, 150, 5000, 10000, 50000):
            info = {'learner_step': envstep // 4, 'envstep': envstep}
            assert light.get_setting_collect(info) == full.get_setting_collect(info), (policy_type, envstep)
            assert light.get_setting_learn(info) == full.get_setting_learn(info) == {}
            assert light.get_setting_eval(info) == full.get_setting_eval(info) == {}
    dqn = command_policy(EasyDict(policy=dict(type='dqn_command', other=dict(eps=dict(eps)))))
    if eps['type'] == 'exp':
        assert dqn.get_setting_collect({'envstep': 300})['eps'] == pytest.approx(0.05 + 0.95 * math.exp(-1))


def test_run_control_retunes_the_torch_free_schedule():
    """Run control swaps ``epsilon_greedy`` on the object behind ``get_setting_collect`` (both kinds)."""
    from ding.rl_utils import get_epsilon_greedy_fn

    cfg = EasyDict(
        type='dqn_command',
        model=dict(obs_shape=4, action_shape=2),
        other=dict(eps=dict(type='linear', start=1.0, end=0.0, decay=100)),
    )
    for mode in (command_policy(EasyDict(policy=cfg)), create_policy(cfg, enable_field=['command']).command_mode):
        owner = mode.get_setting_collect.__self__
        owner.epsilon_greedy = get_epsilon_greedy_fn(0.5, 0.5, 1, 'linear')
        assert mode.get_setting_collect({'envstep': 0}) == {'eps': 0.5}


def test_missing_eps_and_counters_are_named():
    with pytest.raises(KeyError, match='policy.other.eps'):
        command_policy(EasyDict(policy=dict(type='dqn_command', other=dict())))
    mode = command_policy(EasyDict(policy=dict(type='dqn_command', other=dict(eps=dict(start=1.0, end=0.1, decay=10)))))
    with pytest.raises(KeyError, match="needs 'envstep'"):
        mode.get_setting_collect({'learner_step': 3})


def test_lazy_packages_resolve_every_name():
    """``ding.utils`` and ``ding.rl_utils`` import their torch parts on first use, under the same names."""
    import importlib

    import ding.rl_utils
    import ding.utils

    for package in (ding.utils, ding.rl_utils):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
    importlib.import_module('ding.rl_utils.gae')  # a submodule named like its function does not shadow it
    from ding.rl_utils import gae

    assert callable(gae) and ding.rl_utils.gae is gae
    with pytest.raises(AttributeError, match='no_such_name'):
        _ = ding.utils.no_such_name
