"""Finding the parallel pipeline's worker processes from a test (a /proc scan, no psutil)."""

import os


def worker_pids(marker: str) -> list[int]:
    """Pids of live worker processes whose command line mentions ``marker``."""
    pids = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/cmdline', 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
            with open(f'/proc/{entry}/stat') as f:
                state = f.read().rsplit(')', 1)[1].split()[0]
        except OSError:
            continue
        if 'ding.entry.parallel_worker' in cmd and marker in cmd and state != 'Z':
            pids.append(int(entry))
    return pids
