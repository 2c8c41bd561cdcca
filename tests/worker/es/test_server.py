"""The ES server, one test per row of the learner-event table (docs/es.md), each driven by scripted workers
over real sockets on 127.0.0.1."""

import socket
import struct
import threading

import msgpack
import numpy as np
import pytest

from ding.worker.es.client import ServerConnection
from ding.worker.es.protocol import HEADER_LENGTH, ProtocolError
from tests.helpers.es_fake_worker import FakeWorker, running_server, small_es_policy
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.timeout(60)
SMALL_CHUNKS = dict(chunk_bytes=256)  # a model of a few hundred floats then takes several chunks


def test_init_sends_spec_and_the_model_in_chunks_until_complete():
    policy = small_es_policy()
    with running_server(policy, **SMALL_CHUNKS) as (server, _):
        worker = FakeWorker(server.address)
        reply = worker.init()
        assert reply.fields['spec'] == policy.worker_spec()
        assert reply.fields['worker_id'] == 0
        version, data = worker.download()
        assert version == 0
        np.testing.assert_array_equal(np.frombuffer(data, '<f4'), policy.flat_parameters())
        wait_until(lambda: server.stats['downloads_completed'] == 1, what='the download counted complete')
        assert len(server.downloads) == 0
        assert server.stats['bytes_sent'] == 4 * policy.dim
        worker.close()


def test_returns_fill_the_buffer_whose_update_signals_a_download_to_every_worker():
    policy = small_es_policy(population_size=3)
    with running_server(policy) as (server, _):
        workers = [FakeWorker(server.address) for _ in range(2)]
        for worker in workers:
            worker.init()
            assert worker.download()[0] == 0
        for noise_id in range(3):
            workers[0].send_return(version=0, noise_id=noise_id, return_pos=float(noise_id))
        for worker in workers:  # the model update reaches both, also the one that sent nothing
            assert worker.download()[0] == 1
        assert policy.version == 1
        assert server.stats['partials_received'] == 3
        assert server.stats['model_updates'] == 1
        for worker in workers:
            worker.close()


def test_unknown_packet_is_logged_and_nothing_else(caplog):
    with running_server(small_es_policy()) as (server, _):
        worker = FakeWorker(server.address)
        worker.init()
        worker.download()
        header = msgpack.packb({'v': 1, 't': 'gossip', 'news': 'none'})
        worker.conn.send_sealed(HEADER_LENGTH.pack(len(header)) + header)
        wait_until(lambda: server.stats['unknown_packets'] == 1, what='the unknown packet counted')
        assert "unknown packet type 'gossip'" in caplog.text
        assert server.stats['invalid_packets'] == 0
        worker.send_return(version=0)  # the connection still serves
        wait_until(lambda: server.stats['partials_received'] == 1, what='the next return')
        worker.close()


def test_invalid_packets_are_logged_and_the_server_keeps_serving(caplog):
    with running_server(small_es_policy(), max_frame_bytes=4096) as (server, _):
        # An authentic but malformed frame (not msgpack; a wrong schema version): skipped, the connection kept.
        authentic = FakeWorker(server.address)
        authentic.init()
        authentic.download()
        authentic.conn.send_sealed(HEADER_LENGTH.pack(3) + b'\xc1\xc1\xc1')
        header = msgpack.packb({'v': 99, 't': 'return'})
        authentic.conn.send_sealed(HEADER_LENGTH.pack(len(header)) + header)
        wait_until(lambda: server.stats['invalid_packets'] == 2, what='two malformed frames counted')
        assert authentic.still_served()

        # Garbage, a wrong token, an oversize length prefix: each logged, its connection closed.
        garbage = FakeWorker(server.address)
        garbage.conn.send_raw(struct.pack('>I', 40) + bytes(range(40)))
        wrong_token = FakeWorker(server.address, token='not-the-token')
        wrong_token.conn.send('init')
        oversize = FakeWorker(server.address)
        oversize.conn.send_raw(struct.pack('>I', 1 << 30))
        for peer in (garbage, wrong_token, oversize):
            assert peer.is_closed_by_server()
            peer.close()
        wait_until(lambda: server.stats['invalid_packets'] == 5, what='three fatal packets counted')
        assert caplog.text.count('bad MAC') == 2
        assert 'outside [34, 4096]' in caplog.text

        authentic.send_return(version=0)
        wait_until(lambda: server.stats['partials_received'] == 1, what='the authentic worker still served')
        wait_until(lambda: server.stats['connected_workers'] == 1, what='the three closed connections gone')
        authentic.close()


def test_worker_that_never_asks_for_initialisation_is_disconnected():
    with running_server(small_es_policy(), init_timeout=0.3) as (server, _):
        silent = FakeWorker(server.address)
        prompt = FakeWorker(server.address)
        prompt.init()
        assert silent.is_closed_by_server()
        wait_until(lambda: server.stats['init_timeouts'] == 1, what='the init timeout counted')
        assert prompt.still_served()
        wait_until(lambda: server.stats['connected_workers'] == 1, what='the silent worker gone')
        silent.close()
        prompt.close()


def test_disconnect_mid_download_removes_the_download():
    with running_server(small_es_policy(), **SMALL_CHUNKS) as (server, _):
        worker = FakeWorker(server.address)
        worker.init()
        first = worker.recv()
        assert first.type == 'chunk' and len(first.body) < first.fields['total']
        assert len(server.downloads) == 1
        worker.close()
        wait_until(lambda: server.stats['disconnects'] == 1, what='the disconnect handled')
        assert len(server.downloads) == 0
        assert server.stats['downloads_completed'] == 0


def test_slow_worker_skips_recent_models_and_its_very_old_download_resets():
    policy = small_es_policy(population_size=1)
    with running_server(policy, very_old_lag=2, **SMALL_CHUNKS) as (server, _):
        slow, fast = FakeWorker(server.address), FakeWorker(server.address)
        slow.init()
        first = slow.recv()  # model 0, first chunk: not acknowledged for now
        fast.init()
        assert fast.download()[0] == 0
        fast.send_return(version=0)  # model 1: the slow worker's download of model 0 is recent: skipped update
        assert fast.download()[0] == 1
        wait_until(lambda: server.stats['skipped_model_updates'] == 1, what='a skipped model update')
        fast.send_return(version=1)  # model 2: model 0 is now very old
        assert fast.download()[0] == 2
        assert server.stats['download_resets'] == 0  # reset on the next chunk signal, not before
        slow.ack(first)
        restarted = slow.recv()
        assert (restarted.fields['version'], restarted.fields['offset']) == (2, 0)
        wait_until(lambda: server.stats['download_resets'] == 1, what='the reset counted')
        version, data = slow.download(restarted)
        assert version == 2
        np.testing.assert_array_equal(np.frombuffer(data, '<f4'), policy.flat_parameters())
        slow.close()
        fast.close()


def test_partials_flooding_in_while_an_update_runs_are_dropped_and_counted(caplog):
    policy = small_es_policy(population_size=2)
    with running_server(policy) as (server, update):
        worker = FakeWorker(server.address)
        worker.init()
        worker.download()
        update.hold()
        for noise_id in range(2 + 2 + 3):  # a buffer handed to the update, a second one filled, 3 more
            worker.send_return(version=0, noise_id=noise_id)
        wait_until(lambda: server.stats['dropped_partials'] == 3, what='the last three returns dropped')
        assert server.stats['partials_received'] == 7
        assert 'both partial buffers are full' in caplog.text
        update.release()  # the update ends; the full second buffer goes to the next one at once
        wait_until(lambda: server.stats['model_updates'] == 2, what='two updates published')
        assert policy.version == 2
        worker.close()


def test_stale_returns_are_dropped_by_the_staleness_rule():
    policy = small_es_policy(population_size=1, max_partial_lag=1)
    with running_server(policy) as (server, _):
        worker = FakeWorker(server.address)
        worker.init()
        worker.download()
        for version in (0, 1):  # two updates: the model is at version 2
            worker.send_return(version=version)
            assert worker.download()[0] == version + 1
        worker.send_return(version=0)  # lag 2 > max_partial_lag 1
        wait_until(lambda: server.stats['stale_partials'] == 1, what='the stale return counted')
        assert server.stats['partials_received'] == 2 and policy.version == 2
        worker.send_return(version=3)  # a model that does not exist yet: refused as invalid
        wait_until(lambda: server.stats['invalid_packets'] == 1, what='the refused return counted')
        worker.close()


def test_a_client_refuses_a_server_that_does_not_speak_the_protocol():
    listener = socket.create_server(('127.0.0.1', 0))
    try:
        port = listener.getsockname()[1]
        accepted: list[socket.socket] = []

        def answer() -> None:
            conn, _ = listener.accept()
            accepted.append(conn)
            conn.sendall(b'HTTP/1.1 400 Bad Request\r\n\r\n')

        thread = threading.Thread(target=answer)
        thread.start()
        with pytest.raises(ProtocolError):
            ServerConnection('127.0.0.1', port, 'token')
        thread.join()
    finally:
        for conn in accepted:
            conn.close()
        listener.close()
