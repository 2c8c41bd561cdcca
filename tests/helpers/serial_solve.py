"""Run a dizoo config through ``serial_pipeline`` in a temporary directory and return its summary line."""

import copy
import importlib

from ding.config.merge import deep_merge_dicts
from ding.entry import serial_pipeline


def solve_config(config_module, tmp_path, monkeypatch, capsys, stop_value, max_env_step, policy=None):
    """Train until ``stop_value`` or ``max_env_step``; ``policy`` overrides keys of the config's policy section.

    Returns ``(summary line, best eval return)``."""
    monkeypatch.chdir(tmp_path)
    mod = importlib.import_module(config_module)
    main_config = copy.deepcopy(mod.main_config)
    main_config.env.stop_value = stop_value
    if policy:
        main_config.policy = deep_merge_dicts(main_config.policy, policy)
    serial_pipeline((main_config, copy.deepcopy(mod.create_config)), seed=0, max_env_step=max_env_step)
    err = capsys.readouterr().err
    summary = [line for line in err.splitlines() if line.startswith('[ding] ')]
    assert summary, err[-2000:]
    return summary[-1], float(summary[-1].rsplit('best eval return ', 1)[1])
