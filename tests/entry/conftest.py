import pytest

from tests.helpers.short_runs import DQN_CONFIG, run_ding_console


@pytest.fixture(scope='session')
def two_seed_runs(tmp_path_factory):
    """``ding -m serial`` on CartPole DQN with seeds 0 and 1 (130 iterations: 4 evaluations each), default
    console: read by the console, plot and summary tests."""
    workdir = tmp_path_factory.mktemp('two_seeds')
    result = run_ding_console(['-m', 'serial', '-c', DQN_CONFIG, '-s', '0', '-s', '1', '--train-iter', '130'], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, result
