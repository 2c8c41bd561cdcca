"""Whole-file replacement and line appends that readers never see half done."""

import json
import multiprocessing
import os

from ding.utils.atomic_file import append_line, write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / 'summary.json'
    path.write_text('old')
    write_atomic(str(path), b'{"new": 1}\n')
    assert json.loads(path.read_text()) == {'new': 1}
    assert os.listdir(tmp_path) == ['summary.json']


def _append_many(path, writer):
    for i in range(200):
        append_line(path, json.dumps({'writer': writer, 'i': i, 'pad': 'x' * 300}))


def test_lines_appended_by_several_processes_never_interleave(tmp_path):
    path = str(tmp_path / 'eval.jsonl')
    procs = [multiprocessing.Process(target=_append_many, args=(path, w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with open(path) as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 600
    for w in range(3):
        assert [r['i'] for r in records if r['writer'] == w] == list(range(200))
