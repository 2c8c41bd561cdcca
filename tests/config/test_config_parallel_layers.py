"""The config layer compiles parallel configs without importing the worker layer, and ding never imports dizoo."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, '-c', textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_importing_the_parallel_config_loads_no_worker_module():
    out = run_python("""
        import sys
        import ding.config
        from ding.config import compile_config_parallel
        print(sorted(m for m in sys.modules if m.startswith(('ding.worker', 'ding.entry', 'ding.service', 'dizoo'))))
    """)
    assert out.strip() == '[]'


def test_builtin_components_are_ding_only_and_installed_packages_add_theirs():
    out = run_python("""
        from ding.utils.builtin import BUILTIN_MODULES, import_builtin_components
        from ding.utils.registry import COORDINATOR_REGISTRY, ENV_REGISTRY
        import_builtin_components()
        print(all(m.startswith('ding.') for m in BUILTIN_MODULES), 'coordinator' in COORDINATOR_REGISTRY)
        # dizoo's environments come from its 'ding.components' entry points, not from a name in ding
        print('cartpole' in ENV_REGISTRY and 'pendulum' in ENV_REGISTRY)
    """)
    assert out.split() == ['True', 'True', 'True']
