"""The compile step's request and answer files hold the whole config, a configured token included: they are
created readable by their owner only, whatever the umask."""

import json
import os
import stat

from easydict import EasyDict

from ding.entry.parallel_prepare import _prepare_in_child, answer_request


def test_request_and_answer_files_are_private(tmp_path):
    umask = os.umask(0)
    try:
        modes = {}

        def answer_in(request: str, answer: str) -> bool:  # stands for the warm worker: no torch import here
            modes['request'] = stat.S_IMODE(os.stat(request).st_mode)
            modes['dir'] = stat.S_IMODE(os.stat(os.path.dirname(request)).st_mode)
            with open(request) as f:
                assert json.load(f)['main']['service']['token'] == 'a-fixed-token'
            with open(answer, 'w') as f:
                json.dump({'cfg': {'main': {}}, 'resume_path': None}, f)
            return True

        main = EasyDict(exp_name='x', service=dict(enable=True, token='a-fixed-token'))
        cfg, resume = _prepare_in_child(main, EasyDict(), EasyDict(), 0, None, answer_in)
        assert cfg == {'main': {}} and resume is None
        assert modes == {'request': 0o600, 'dir': 0o700}

        request, answer = tmp_path / 'request.json', tmp_path / 'answer.json'
        request.write_text('{}')  # no 'main': the answer is the error, written all the same
        assert answer_request(str(request), str(answer)) == 1
        assert json.loads(answer.read_text())['error']['type'] == 'KeyError'
        assert stat.S_IMODE(os.stat(answer).st_mode) == 0o600
    finally:
        os.umask(umask)
