"""Process start-up helpers: which code pages may be released, and that releasing them changes no result."""

import json
import subprocess
import sys
import textwrap

import pytest

from ding.entry.startup import releasable_code_ranges
from tests.helpers.processes import child_env

SMAPS = """\
7f0000000000-7f0000100000 r--p 00000000 08:01 42 /env/lib/torch/lib/libtorch_cpu.so
Rss:                 512 kB
Anonymous:             0 kB
7f0000100000-7f0004000000 r-xp 00100000 08:01 42 /env/lib/torch/lib/libtorch_cpu.so
Rss:               46080 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
7f0004000000-7f0004100000 rw-p 04000000 08:01 42 /env/lib/torch/lib/libtorch_cpu.so
Rss:                1024 kB
Anonymous:          1024 kB
7f0005000000-7f0005800000 r-xp 00010000 08:01 43 /env/lib/torch/lib/libtorch_python.so
Rss:                8192 kB
Anonymous:             0 kB
7f0006000000-7f0006200000 r-xp 00010000 08:01 44 /other/libtorch_cpu.so
Rss:                2048 kB
Anonymous:             4 kB
7f0007000000-7f0007100000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
"""


def test_only_unmodified_executable_mappings_of_the_named_library_are_releasable():
    # the second libtorch_cpu.so text mapping has a private (modified) page: it must be kept
    assert releasable_code_ranges(SMAPS) == [(0x7F0000100000, 0x7F0004000000)]
    assert releasable_code_ranges(SMAPS, ('libtorch_python.so',)) == [(0x7F0005000000, 0x7F0005800000)]
    assert releasable_code_ranges(SMAPS, ('libc.so.6',)) == []


PROBE = textwrap.dedent("""
    import json, os, sys
    import torch
    from ding.entry.startup import release_load_time_code

    def text_rss_kb():
        total, inside = 0, False
        for line in open('/proc/self/smaps'):
            fields = line.split()
            if fields and '-' in fields[0] and not fields[0].endswith(':'):
                inside = len(fields) >= 6 and fields[1] == 'r-xp' and fields[5].endswith('libtorch_cpu.so')
            elif inside and fields[0] == 'Rss:':
                total += int(fields[1])
        return total

    def train():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, foreach=False)
        x = torch.randn(16, 4)
        for _ in range(5):
            loss = net(x).log_softmax(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().tolist() for p in net.parameters()]

    before_rss = text_rss_kb()
    reference = train()
    released = release_load_time_code()
    after_rss = text_rss_kb()
    again = train()
    print(json.dumps(dict(released=released, before=before_rss, after=after_rss, same=again == reference)))
""")


def _probe(**env):
    out = subprocess.run(
        [sys.executable, '-c', PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(**env),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='needs /proc and madvise')
def test_releasing_torch_load_time_code_shrinks_the_resident_set_and_changes_no_result():
    result = _probe()
    assert result['released'] > 0
    assert result['after'] < result['before'] / 2, result  # ~45 MB resident after import, none right after
    assert result['same'], 'training after the release must give bit-identical weights'


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='needs /proc and madvise')
def test_ding_keep_load_code_turns_the_release_off():
    result = _probe(DING_KEEP_LOAD_CODE='1')
    assert result['released'] == 0 and result['after'] >= result['before']
