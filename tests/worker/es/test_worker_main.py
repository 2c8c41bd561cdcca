"""The ES worker (``ding es-worker``): it initialises, evaluates with the models it downloads, sends returns,
and exits cleanly when the server goes."""

import threading

import pytest

from ding.worker.es.worker_main import EXIT_UNREACHABLE, main, parse_address, run_worker
from tests.helpers.es_fake_worker import TOKEN, running_server, small_es_policy
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.timeout(90)


def test_worker_trains_with_the_server_and_exits_when_it_goes():
    policy = small_es_policy(population_size=2)
    codes: list[int] = []
    with running_server(policy, chunk_bytes=256) as (server, _):
        host, port = server.address
        worker = threading.Thread(target=lambda: codes.append(run_worker(host, port, TOKEN)))
        worker.start()
        try:
            # The initial model and at least one update downloaded (a download completes after its last ack).
            wait_until(
                lambda: server.stats['model_updates'] >= 2 and server.stats['downloads_completed'] >= 2,
                what='two updates from the worker returns and two downloads completed',
            )
            assert server.stats['invalid_packets'] == 0
            assert server.stats['env_steps'] > 0
        finally:
            server.stop()
            worker.join(30.0)
    assert codes == [0]


def test_worker_with_a_wrong_token_exits_unreachable():
    with running_server(small_es_policy()) as (server, _):
        assert run_worker(*server.address, 'not-the-token') == EXIT_UNREACHABLE
        wait_until(lambda: server.stats['invalid_packets'] == 1, what='the refused worker counted')


def test_command_line_errors_name_the_argument(monkeypatch, capsys):
    monkeypatch.delenv('DING_RUN_SECRET', raising=False)
    with pytest.raises(SystemExit) as exc:
        main(['--connect', '127.0.0.1:1'])
    assert exc.value.code == 2 and 'no token' in capsys.readouterr().err
    with pytest.raises(ValueError, match='HOST:PORT'):
        parse_address('localhost')
    assert parse_address('[::1]:7000') == ('::1', 7000)
