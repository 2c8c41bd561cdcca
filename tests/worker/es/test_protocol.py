"""The ES wire format: signed frames that cannot be forged, replayed or reflected; schema checks after the MAC."""

import pytest

from ding.worker.es.protocol import FrameCodec, ProtocolError, new_nonce, session_key


def pair(token: str = 'secret') -> tuple[FrameCodec, FrameCodec]:
    key = session_key(token, new_nonce())
    return FrameCodec(key, 'server'), FrameCodec(key, 'worker')


def body(frame: bytes) -> bytes:
    return frame[4:]  # without the length prefix


def test_a_message_round_trips_with_its_body():
    server, worker = pair()
    frame = server.encode('chunk', {'version': 3, 'offset': 0, 'total': 8}, b'\x00' * 8)
    assert worker.frame_length(frame[:4]) == len(frame) - 4
    message = worker.decode(body(frame))
    assert (message.type, message.fields, message.body) == ('chunk', {'version': 3, 'offset': 0, 'total': 8}, bytes(8))


def test_replayed_reflected_and_forged_frames_are_fatal():
    server, worker = pair()
    frame = body(worker.encode('init'))
    server.decode(frame)
    with pytest.raises(ProtocolError, match='bad MAC') as replay:
        server.decode(frame)  # the same frame again: its sequence number is spent
    assert replay.value.fatal
    with pytest.raises(ProtocolError, match='bad MAC'):
        worker.decode(body(worker.encode('init')))  # a worker's own frame sent back to it
    _, other_token = pair('another')
    with pytest.raises(ProtocolError, match='bad MAC'):
        server.decode(body(other_token.encode('init')))


def test_schema_errors_are_not_fatal_and_name_the_field():
    server, worker = pair()
    with pytest.raises(ProtocolError, match="'noise_id'") as exc:
        server.decode(body(worker.encode('return', dict(noise_id=True, return_pos=1.0, return_neg=0.0, version=0,
                                                         env_steps=1))))  # fmt: skip
    assert not exc.value.fatal
    with pytest.raises(ProtocolError, match='outside'):
        server.frame_length((1 << 31).to_bytes(4, 'big'))
    with pytest.raises(ValueError, match='takes fields'):
        worker.encode('return', {'noise_id': 1})
