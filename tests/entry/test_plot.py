"""``ding plot``: learning curves of real runs as a PNG; bad input is one line naming the path, exit 2."""

import subprocess
import sys

import pytest

from ding.entry.plot import DEFAULT_DPI, FIGURE_SIZE, seeds_mean_and_spread
from ding.entry.plot import main as plot_main
from tests.helpers.processes import child_env


@pytest.mark.slow
def test_plot_of_two_seeds_writes_a_png_of_the_expected_size(two_seed_runs, tmp_path):
    workdir, _ = two_seed_runs
    output = tmp_path / 'curves.png'
    result = subprocess.run(
        [sys.executable, '-m', 'ding.entry.cli', 'plot', 'cartpole_dqn_seed0', 'cartpole_dqn_seed1', '-o', str(output)],
        cwd=workdir,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    from matplotlib.image import imread  # the test extra has matplotlib

    image = imread(str(output))
    assert image.shape[:2] == (int(FIGURE_SIZE[1] * DEFAULT_DPI), int(FIGURE_SIZE[0] * DEFAULT_DPI))
    assert image.std() > 0.05  # curves drawn, not a blank canvas


@pytest.mark.slow
def test_plot_of_one_run_and_a_custom_dpi(two_seed_runs, tmp_path):
    workdir, _ = two_seed_runs
    output = tmp_path / 'one.png'
    assert plot_main([str(workdir / 'cartpole_dqn_seed1'), '-o', str(output), '--dpi', '50']) == 0
    from matplotlib.image import imread

    assert imread(str(output)).shape[:2] == (int(FIGURE_SIZE[1] * 50), int(FIGURE_SIZE[0] * 50))


def test_a_directory_that_is_not_a_run_is_one_error_naming_it(tmp_path, capsys):
    (tmp_path / 'not_a_run').mkdir()
    for path, message in (
        (tmp_path / 'missing', 'no such directory'),
        (tmp_path / 'not_a_run', 'not a run directory (no log/ and no summary.json in it)'),
    ):
        assert plot_main([str(path), '-o', str(tmp_path / 'x.png')]) == 2
        assert capsys.readouterr().err == f'ding plot: error: {path}: {message}\n'
    assert not (tmp_path / 'x.png').exists()


def test_a_run_without_evaluations_yet_is_one_error_naming_the_file(tmp_path, capsys):
    run = tmp_path / 'fresh_run'
    (run / 'log').mkdir(parents=True)
    assert plot_main([str(run), '-o', str(tmp_path / 'x.png')]) == 2
    assert capsys.readouterr().err == (
        f'ding plot: error: {run}: no evaluation recorded yet ({run}/log/eval.jsonl does not exist)\n'
    )
    (run / 'log' / 'eval.jsonl').write_text(
        '{"train_iter": 0, "env_step": 0, "eval_return": 9.4, "wall_s": 2.0}\n{"tra'
    )
    assert plot_main([str(run), '-o', str(tmp_path / 'x.png')]) == 0  # a line still being written is left out
    assert capsys.readouterr().err == f'ding plot: wrote {tmp_path / "x.png"}\n'
    (run / 'log' / 'eval.jsonl').write_text('garbage\n')
    assert plot_main([str(run), '-o', str(tmp_path / 'x.png')]) == 2
    assert capsys.readouterr().err.startswith(
        f"ding plot: error: {run}/log/eval.jsonl:1: not an evaluation record: 'garbage'"
    )


def test_without_matplotlib_the_error_names_the_extra(tmp_path):
    run = tmp_path / 'run'
    (run / 'log').mkdir(parents=True)
    (run / 'log' / 'eval.jsonl').write_text('{"train_iter": 0, "env_step": 0, "eval_return": 9.4, "wall_s": 2.0}\n')
    hide = "import sys; sys.modules['matplotlib'] = None; from ding.entry.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, '-c', hide, 'plot', str(run)], cwd=tmp_path, env=child_env(), capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr == (
        "ding plot: error: matplotlib is not installed; it comes with the plot extra: pip install 'ding[plot]'\n"
    )


def test_a_seed_that_finished_keeps_its_last_return_in_the_mean():
    solved_early = [dict(env_step=0, eval_return=10.0), dict(env_step=100, eval_return=200.0)]
    solved_late = [
        dict(env_step=0, eval_return=20.0),
        dict(env_step=150, eval_return=60.0),
        dict(env_step=300, eval_return=198.0),
    ]
    grid, mean, low, high = seeds_mean_and_spread([solved_early, solved_late], 'env_step')
    assert list(grid) == [0, 100, 150, 300]
    assert list(mean) == [15.0, 110.0, 130.0, 199.0]  # after step 100 the first seed counts with its 200
    assert list(low) == [10.0, 20.0, 60.0, 198.0] and list(high) == [20.0, 200.0, 200.0, 200.0]


def test_seeds_that_do_not_overlap_have_no_mean():
    first = [dict(env_step=0, eval_return=1.0), dict(env_step=10, eval_return=2.0)]
    later = [dict(env_step=20, eval_return=3.0)]
    assert seeds_mean_and_spread([first, later], 'env_step') is None
