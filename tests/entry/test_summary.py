"""``ding summary``: a table of runs from their ``summary.json`` (or, for a run still going, its evaluations)."""

import json
import os
import subprocess
import sys

import pytest

from ding.entry.summary import main as summary_main
from tests.helpers.processes import child_env


@pytest.mark.slow
def test_summary_lists_each_run_with_its_outcome(two_seed_runs):
    workdir, _ = two_seed_runs
    result = subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', 'summary', 'cartpole_dqn_seed0', 'cartpole_dqn_seed1'],
        cwd=workdir,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    head, rule, *rows = result.stdout.splitlines()
    assert head.split() == ['run', 'config', 'seed', 'solved', 'env', 'steps', 'iters', 'wall', 's', 'best', 'return']
    assert set(rule) == {'-'} and len(rows) == 2
    for seed, row in enumerate(rows):
        with open(workdir / f'cartpole_dqn_seed{seed}' / 'summary.json') as f:
            summary = json.load(f)
        cells = row.split()
        assert cells[:4] == [f'cartpole_dqn_seed{seed}', 'cartpole_dqn', str(seed), 'no']
        assert cells[6:] == [
            str(summary['env_steps']),
            str(summary['train_iters']),
            f'{summary["wall_s"]:.2f}',
            f'{summary["best_eval_return"]:.2f}',
        ]


def test_a_run_still_going_is_shown_from_its_evaluations(tmp_path, capsys):
    run = tmp_path / 'ppo_seed2'
    (run / 'log').mkdir(parents=True)
    (run / 'log' / 'eval.jsonl').write_text(
        '{"train_iter": 0, "env_step": 0, "eval_return": 9.5, "wall_s": 2.0}\n'
        '{"train_iter": 40, "env_step": 800, "eval_return": 31.0, "wall_s": 3.5}\n'
        '{"train_iter": 80, "env_step": 1600, "eval_return": 22.0, "wall_s": 5.0}\n'
    )
    assert summary_main([str(run), '--json']) == 0
    row = json.loads(capsys.readouterr().out)
    assert row == {
        'run': os.path.normpath(str(run)),
        'config': 'ppo',
        'seed': 2,
        'solved': 'running',
        'env_steps': 1600,
        'train_iters': 80,
        'wall_s': 5.0,
        'best_return': 31.0,
    }


def test_bad_input_is_one_error_naming_the_path(tmp_path, capsys):
    (tmp_path / 'empty_run' / 'log').mkdir(parents=True)
    (tmp_path / 'broken' / 'log').mkdir(parents=True)
    (tmp_path / 'broken' / 'summary.json').write_text('{"solved": tru')
    for path, message in (
        (tmp_path / 'nothing', 'no such directory'),
        (tmp_path / 'empty_run', f'no evaluation recorded yet ({tmp_path}/empty_run/log/eval.jsonl does not exist)'),
    ):
        assert summary_main([str(path)]) == 2
        assert capsys.readouterr().err == f'ding summary: error: {path}: {message}\n'
    assert summary_main([str(tmp_path / 'broken')]) == 2
    assert capsys.readouterr().err.startswith(
        f'ding summary: error: {tmp_path}/broken/summary.json: not a readable summary'
    )
