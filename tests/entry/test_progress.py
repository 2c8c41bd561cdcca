"""What a run shows and leaves: a short console (the bar, a line per evaluation, the summary once), ``-q`` /
``-v``, and ``summary.json`` / ``log/eval.jsonl`` agreeing with the run's other logs."""

import json
import os
import re

import pytest

from ding.entry.run_records import read_evals, read_summary
from tests.helpers.learner_policies import read_tb_events
from tests.helpers.short_runs import DQN_CONFIG, ES_CONFIG, console_lines, duplicated, run_ding_console

# A short run prints the evaluations (a few), the summary, and tqdm's clearing of the bar before each of them.
MAX_CONSOLE_LINES = 40
SUMMARY = re.compile(
    r'^\[ding\] (\S+): (SOLVED|not solved \(.+\)) \| stop value \S+ \| env steps (\d+) \| train iters (\d+) \| '
    r'wall ([\d.]+)s \(set-up ([\d.]+)s\) \| (best checkpoint (\S+) \| )?best eval return (\S+)$'
)


def _summary_lines(lines):
    return [line for line in lines if line.startswith('[ding] ')]


def _check_quiet_console(stderr, bar_name, runs):
    assert stderr.count('\n') < MAX_CONSOLE_LINES * runs, stderr
    lines = console_lines(stderr, bar_name)
    assert not duplicated(lines), duplicated(lines)
    assert not [line for line in lines if line.startswith('[evaluator] [evaluator]') or '[learner] [ding]' in line]
    assert 'reward_mean' not in stderr and 'hook time since last show' not in stderr  # the tables stay in log/
    return lines


@pytest.mark.slow
def test_a_serial_run_prints_the_bar_one_line_per_evaluation_and_the_summary_once(two_seed_runs):
    workdir, result = two_seed_runs
    for seed in (0, 1):
        exp = f'cartpole_dqn_seed{seed}'
        lines = _check_quiet_console(result.stderr, r'cartpole_dqn_seed\d', 2)
        evals = read_evals(str(workdir / exp))
        assert len([line for line in lines if line.startswith(f'[eval] {exp}: return ')]) == len(evals) == 4
        summaries = [line for line in _summary_lines(lines) if line.startswith(f'[ding] {exp}:')]
        assert len(summaries) == 1, lines


@pytest.mark.slow
def test_summary_json_matches_the_summary_line_and_the_logs(two_seed_runs):
    workdir, result = two_seed_runs
    exp_dir = workdir / 'cartpole_dqn_seed0'
    summary = read_summary(str(exp_dir))
    line = [ln for ln in _summary_lines(console_lines(result.stderr, 'cartpole_dqn_seed0')) if 'seed0:' in ln][0]
    match = SUMMARY.match(line)
    assert match, line
    assert summary['exp_name'] == match.group(1) == 'cartpole_dqn_seed0' and summary['seed'] == 0
    assert (summary['solved'], summary['reason']) == (False, 'max_train_iter reached')
    assert summary['env_steps'] == int(match.group(3)) and summary['train_iters'] == int(match.group(4)) >= 130
    assert f'{summary["wall_s"]:.1f}' == match.group(5) and f'{summary["setup_s"]:.1f}' == match.group(6)
    assert 0 < summary['setup_s'] < summary['wall_s']
    assert summary['best_checkpoint'] == match.group(8) and os.path.isfile(workdir / summary['best_checkpoint'])
    # The evaluations of eval.jsonl are the evaluator's (its tensorboard scalars), at the same env steps.
    evals = read_evals(str(exp_dir))
    tb = read_tb_events(str(exp_dir / 'log'))
    assert [e['eval_return'] for e in evals] == pytest.approx([v for _, v in tb['evaluator_step/reward_mean']])
    assert [e['env_step'] for e in evals] == [s for s, _ in tb['evaluator_step/reward_mean']]
    assert [e['train_iter'] for e in evals] == [0, 42, 84, 126]
    assert summary['evaluations'] == len(evals)
    assert summary['best_eval_return'] == pytest.approx(max(e['eval_return'] for e in evals))
    assert f'{summary["best_eval_return"]:.2f}' == match.group(9)
    assert all(summary['setup_s'] <= e['wall_s'] <= summary['wall_s'] for e in evals)
    with open(exp_dir / 'log' / 'learner' / 'learner_logger.txt') as f:
        assert line in f.read()  # the log file keeps the summary too


@pytest.mark.slow
def test_quiet_prints_only_the_summary(tmp_path):
    result = run_ding_console(['-q', '-m', 'serial', '-c', DQN_CONFIG, '-s', '0', '--train-iter', '10'], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.splitlines() == [result.stderr.strip()] and SUMMARY.match(result.stderr.strip())
    assert result.stdout == ''
    assert len(read_evals(str(tmp_path / 'cartpole_dqn_seed0'))) == 1  # the records are written all the same


@pytest.mark.slow
def test_verbose_adds_the_tables_with_one_prefix_and_one_summary(tmp_path):
    result = run_ding_console(['-v', '-m', 'serial', '-c', DQN_CONFIG, '-s', '0', '--train-iter', '10'], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = console_lines(result.stderr, 'cartpole_dqn_seed0')
    assert 'reward_mean' in result.stderr and '[learner] [RANK0]: learner saved checkpoint' in result.stderr
    assert '[evaluator] env 0 finished an episode' in result.stderr and '[evaluator] [evaluator]' not in result.stderr
    assert len(_summary_lines(lines)) == 1 and '[learner] [ding]' not in result.stderr


@pytest.mark.slow
def test_an_es_run_with_worker_processes_keeps_the_console_short(tmp_path):
    args = ['-m', 'es', '-c', ES_CONFIG, '-s', '0', '--train-iter', '6', '--exp-name', 'es_console']
    result = run_ding_console(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = _check_quiet_console(result.stderr, 'es_console', 1)
    assert len(_summary_lines(lines)) == 1 and SUMMARY.match(_summary_lines(lines)[0])
    evals = read_evals(str(tmp_path / 'es_console'))
    assert len([line for line in lines if line.startswith('[eval] es_console: return ')]) == len(evals) >= 2
    assert json.loads((tmp_path / 'es_console' / 'summary.json').read_text())['train_iters'] >= 6


def test_a_bad_console_key_is_one_error_naming_it(tmp_path):
    config = tmp_path / 'loud.py'
    config.write_text(
        f'from importlib.machinery import SourceFileLoader\n'
        f'dqn = SourceFileLoader("dqn", {DQN_CONFIG!r}).load_module()\n'
        'main_config, create_config = dqn.main_config, dqn.create_config\n'
        "main_config.console = 'loud'\n"
    )
    result = run_ding_console(['-m', 'serial', '-c', str(config)], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"ding: error: {config}: top-level key 'console' must be one of ['quiet', 'normal', 'verbose'], got 'loud'"
    )
