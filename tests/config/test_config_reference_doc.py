"""docs/config.md carries the component defaults generated from the code; they must not drift."""

import os

from ding.config.reference import BEGIN, END, generate
from tests.helpers.processes import ROOT

DOC = os.path.join(ROOT, 'docs', 'config.md')


def test_config_doc_lists_current_component_defaults():
    text = open(DOC, encoding='utf-8').read()
    assert BEGIN in text and END in text, 'docs/config.md lost its generated section'
    section = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert section == generate(), 'component defaults changed: run `python -m ding.config.reference` and paste it'
