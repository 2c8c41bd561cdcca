import os
import signal

import pytest

from ding.utils.stop_request import StopRequest, signals_request_stop


def test_a_signal_is_recorded_and_acted_on_only_at_the_check():
    request = StopRequest()
    with signals_request_stop(request):
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.requested and request.signum == signal.SIGTERM  # nothing raised where the signal landed
        with pytest.raises(KeyboardInterrupt, match='signal 15'):
            request.check()


def test_a_second_signal_stops_at_once():
    request = StopRequest()
    with signals_request_stop(request):
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(KeyboardInterrupt, match='second stop signal'):
            os.kill(os.getpid(), signal.SIGTERM)


def test_the_previous_handlers_are_back_after_the_run():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with signals_request_stop(StopRequest()):
        assert signal.getsignal(signal.SIGTERM) != before[0]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    StopRequest().check()  # no signal: no stop
