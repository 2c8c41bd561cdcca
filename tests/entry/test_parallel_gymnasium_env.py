"""The parallel pipeline on the generic ``gymnasium`` env type: DI-engine's parallel CartPole DQN config with
``type='gymnasium'`` instead of dizoo's env module; its env section is checked before any worker starts."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from ding.config import ConfigError
from ding.config.loader import read_config
from ding.config.parallel import compile_config_parallel
from tests.helpers.processes import ROOT, child_env

PARALLEL_DQN = f'{ROOT}/dizoo/classic_control/cartpole/config/parallel/cartpole_dqn_config.py'


def gymnasium_configs(**env):
    main, create, system = read_config(PARALLEL_DQN)
    main, create = copy.deepcopy(main), copy.deepcopy(create)
    main.env.update(env_id='CartPole-v1', **env)
    create.env = dict(type='gymnasium')
    return main, create, system


def test_an_unknown_env_id_is_refused_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main, create, system = gymnasium_configs()
    main.env.env_id = 'CartPol-v1'
    with pytest.raises(ConfigError, match=r"(?s)parallel config: .*env.env_id 'CartPol-v1': gymnasium cannot make it"):
        compile_config_parallel(main, create, system, save_cfg=False)


@pytest.mark.slow
def test_a_parallel_run_trains_on_a_gymnasium_id(tmp_path):
    main, create, system = gymnasium_configs()
    config = tmp_path / 'cartpole_gymnasium_parallel_config.py'
    config.write_text(
        f'main_config = {dict(main)!r}\ncreate_config = {dict(create)!r}\nsystem_config = {dict(system)!r}\n'
    )
    result = subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', '-m', 'parallel', '-c', str(config), '--train-iter', '20'],
        cwd=tmp_path,
        env=child_env(DING_PROGRESS='0', OMP_NUM_THREADS='1'),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    iters = re.search(r'train iters (\d+)', result.stderr + result.stdout)
    assert iters is not None and int(iters.group(1)) >= 20
