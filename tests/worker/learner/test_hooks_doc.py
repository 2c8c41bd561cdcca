"""Runs every Python block of docs/hooks.md, in order, in one namespace (the page promises they run)."""

import os
import re

from tests.helpers.processes import ROOT

DOC = os.path.join(ROOT, 'docs', 'hooks.md')


def python_blocks(text):
    return re.findall(r'^```python\n(.*?)^```', text, flags=re.S | re.M)


def test_every_python_block_in_the_hooks_doc_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(open(DOC).read())
    assert len(blocks) >= 4  # short form, full form, custom hook example, custom hook from config
    namespace = {'__name__': 'hooks_doc'}
    for i, block in enumerate(blocks):
        exec(compile(block, f'docs/hooks.md[python block {i}]', 'exec'), namespace)
    # The custom-hook example trained, logged its EMA and saved at after_run.
    assert os.path.exists('hook_demo/ckpt/iteration_100.safetensors')
    assert 'loss_ema' in capsys.readouterr().out
