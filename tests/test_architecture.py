"""Architecture rules of ``ding/`` checked on its source with ``ast`` (docs/architecture.md, DEVELOPERS).

No private or patched third-party internals: no ``torch._*`` (``torch._foreach_*`` are public), no reads of a
module's ``_parameters`` / ``_modules`` / ``_buffers``, no ``madvise``, ``gc.freeze`` or ``os._exit``, no assignment
to an attribute of an imported third-party module or class (monkeypatching). Layers: ``ding`` never imports
``dizoo``; an import of a ``ding`` module inside a function says why it is deferred (``# deferred: <why>``).
Modules stay small (at most ``MAX_MODULE_LINES`` lines). Every failure names ``file:line``.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / 'ding'
MAX_MODULE_LINES = 500
DIZOO_MODULE = re.compile(r'dizoo(\.\w+)*')
PRIVATE_MODULE_STATE = ('_parameters', '_modules', '_buffers')
# Settings torch documents as attributes to assign (``torch.backends.cudnn.deterministic = True``).
DOCUMENTED_TORCH_SETTINGS = ('torch.backends.',)


@dataclass(frozen=True)
class Module:
    path: Path
    source: str
    tree: ast.Module
    imports: dict[str, str]  # local name -> the absolute module or object it is bound to, for absolute imports

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))

    def where(self, node: ast.AST) -> str:
        return f'{self.name}:{getattr(node, "lineno", 0)}'


def _imported_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split('.')[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f'{node.module}.{alias.name}'
    return names


@functools.cache
def modules() -> tuple[Module, ...]:
    found = []
    for path in sorted(PACKAGE.rglob('*.py')):
        source = path.read_text(encoding='utf-8')
        tree = ast.parse(source, filename=str(path))
        found.append(Module(path, source, tree, _imported_names(tree)))
    return tuple(found)


def _dotted(node: ast.AST, imports: dict[str, str]) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, its root replaced by what it was imported as (None otherwise)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imports:
        return None
    return '.'.join([imports[node.id], *reversed(parts)])


def _is_private(part: str) -> bool:
    return part.startswith('_') and not (part.startswith('__') and part.endswith('__'))


def _third_party(dotted: str) -> bool:
    root = dotted.split('.')[0]
    return root not in ('ding', 'dizoo', '__future__') and root not in sys.stdlib_module_names


def _violations(check: Callable[[Module], Iterator[str]]) -> list[str]:
    return [found for module in modules() for found in check(module)]


def _report(violations: list[str], rule: str) -> str:
    return f'{rule}:\n  ' + '\n  '.join(violations)


# ---- no private or patched third-party internals -----------------------------------------------------------


def _private_torch(module: Module) -> Iterator[str]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f'{node.module}.{alias.name}' for alias in node.names]
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            dotted = _dotted(node, module.imports)
            names = [dotted] if dotted else []
        else:
            continue
        for name in names:
            parts = name.split('.')
            if parts[0] == 'torch' and any(_is_private(p) and not p.startswith('_foreach_') for p in parts):
                yield f'{module.where(node)}: {name}'


def test_no_private_torch_attributes():
    violations = sorted(set(_violations(_private_torch)))
    assert not violations, _report(violations, "torch's private names (only torch._foreach_* is allowed)")


def _module_state(module: Module) -> Iterator[str]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_MODULE_STATE:
            yield f'{module.where(node)}: .{node.attr} (use parameters() / named_modules() / buffers())'


def test_no_reads_of_a_modules_private_state():
    violations = _violations(_module_state)
    assert not violations, _report(violations, "nn.Module's private dicts")


def _named(module: Module, wanted: str) -> Iterator[ast.AST]:
    """Nodes that reach ``wanted`` (``'os._exit'``): ``os._exit``, an alias of it, ``from os import _exit``."""
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and _dotted(node, module.imports) == wanted:
            yield node
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if any(f'{node.module}.{alias.name}' == wanted for alias in node.names):
                yield node


def _process_hacks(module: Module) -> Iterator[str]:
    for wanted in ('os._exit', 'gc.freeze'):
        for node in _named(module, wanted):
            yield f'{module.where(node)}: {wanted}'
    for node in ast.walk(module.tree):
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        if name == 'madvise':
            yield f'{module.where(node)}: madvise'


def test_no_process_start_up_or_exit_hacks():
    violations = sorted(set(_violations(_process_hacks)))
    assert not violations, _report(violations, 'madvise / gc.freeze / os._exit (exit with sys.exit or return)')


def _monkeypatches(module: Module) -> Iterator[str]:
    for node in ast.walk(module.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ('setattr', 'delattr'):
            owner = _dotted(node.args[0], module.imports) if node.args else None
            if owner and _third_party(owner):
                yield f'{module.where(node)}: {node.func.id}({owner}, ...)'
            continue
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            dotted = _dotted(target, module.imports)
            if dotted and _third_party(dotted) and not dotted.startswith(DOCUMENTED_TORCH_SETTINGS):
                yield f'{module.where(node)}: {dotted} = ...'


def test_no_monkeypatching_of_third_party_modules_or_classes():
    violations = _violations(_monkeypatches)
    assert not violations, _report(violations, "assignments to a third-party module's or class's attributes")


# ---- layers -----------------------------------------------------------------------------------------------


def _mentions_dizoo(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Constant) and isinstance(sub.value, str) and 'dizoo' in sub.value for sub in ast.walk(node)
    )


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _dizoo_imports(module: Module) -> Iterator[str]:
    lines = set()
    for found in _dizoo_import_nodes(module):
        if found.split(': ')[0] not in lines:  # an import_module('dizoo...') call names its line once
            lines.add(found.split(': ')[0])
            yield found


def _dizoo_import_nodes(module: Module) -> Iterator[str]:
    docstrings = _docstrings(module.tree)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if DIZOO_MODULE.fullmatch(node.value):  # a module name to import later (a list of modules to load)
                yield f'{module.where(node)}: {node.value!r}'
        if isinstance(node, ast.Import) and any(alias.name.split('.')[0] == 'dizoo' for alias in node.names):
            yield f'{module.where(node)}: import dizoo'
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or '').split('.')[0] == 'dizoo':
            yield f'{module.where(node)}: from {node.module} import ...'
        elif isinstance(node, ast.Call) and _is_import_call(node, module) and _mentions_dizoo(node):
            yield f'{module.where(node)}: {ast.unparse(node)[:120]}'


def _is_import_call(node: ast.Call, module: Module) -> bool:
    if isinstance(node.func, ast.Name) and node.func.id == '__import__':
        return True
    return _dotted(node.func, module.imports) == 'importlib.import_module'


def test_ding_never_imports_dizoo():
    violations = _violations(_dizoo_imports)
    assert not violations, _report(violations, 'ding imports dizoo (dizoo registers itself with ding, not the reverse)')


def _comments_by_line(source: str) -> dict[int, str]:
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
    return comments


def _function_level_imports(tree: ast.Module) -> Iterator[ast.stmt | ast.Call]:
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
                yield node


def _imports_ding(node: ast.stmt | ast.Call, module: Module) -> str | None:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names if alias.name.split('.')[0] == 'ding']
        return f'import {", ".join(names)}' if names else None
    if isinstance(node, ast.ImportFrom):
        if node.level or (node.module or '').split('.')[0] == 'ding':
            return f'from {"." * node.level}{node.module or ""} import ...'
        return None
    if isinstance(node, ast.Call) and _is_import_call(node, module) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.split('.')[0] == 'ding':
            return ast.unparse(node)
    return None


def _undeclared_deferred_imports(module: Module) -> Iterator[str]:
    comments = _comments_by_line(module.source)
    seen: set[int] = set()
    for node in _function_level_imports(module.tree):
        what = _imports_ding(node, module)
        if what is None or id(node) in seen:
            continue
        seen.add(id(node))
        lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if not any('# deferred:' in comments.get(line, '') for line in lines):
            yield f'{module.where(node)}: {what} (hoist it, or end the line with "# deferred: <why>")'


def test_function_level_imports_of_ding_say_why_they_are_deferred():
    violations = _violations(_undeclared_deferred_imports)
    assert not violations, _report(violations, 'imports of ding modules inside functions')


# ---- size ------------------------------------------------------------------------------------------------


def _long_modules(module: Module) -> Iterator[str]:
    lines = module.source.count('\n')
    if lines > MAX_MODULE_LINES:
        yield f'{module.name}:1: {lines} lines (split it: one job per module)'


def test_no_module_over_the_line_limit():
    violations = _violations(_long_modules)
    assert not violations, _report(violations, f'modules over {MAX_MODULE_LINES} lines')


# ---- the checks themselves -------------------------------------------------------------------------------


def _check_source(check: Callable[[Module], Iterator[str]], source: str) -> list[str]:
    tree = ast.parse(source)
    return list(check(Module(PACKAGE / 'example.py', source, tree, _imported_names(tree))))


@pytest.mark.parametrize(
    ('check', 'source', 'found'),
    [
        (_private_torch, 'import torch\ntorch._C._get_tracing_state()', 2),
        (_private_torch, 'import torch.nn as nn\nx = nn.modules.batchnorm._BatchNorm', 1),
        (_private_torch, 'from torch.nn.modules import module as m\nm._global_forward_hooks', 1),
        (_private_torch, 'import torch._dynamo', 1),
        (_private_torch, 'import torch\ntorch._foreach_add_([], 1)\ntorch.__version__', 0),
        (_module_state, 'def f(m):\n    return m._parameters["weight"]', 1),
        (_process_hacks, 'import os\nos._exit(0)', 1),
        (_process_hacks, 'from os import _exit', 1),
        (_process_hacks, 'import gc as g\ng.freeze()', 1),
        (_process_hacks, 'libc.madvise(0, 0, 4)', 1),
        (_monkeypatches, 'import torch\ntorch.optim.Adam.step = None', 1),
        (_monkeypatches, 'from requests import Response\nResponse._content = b""', 1),
        (_monkeypatches, 'import torch\nsetattr(torch.optim.Adam, "step", None)', 1),
        (_monkeypatches, 'import torch\ntorch.backends.cudnn.deterministic = True', 0),
        (_monkeypatches, 'import requests\nr = requests.Response()\nr.status_code = 200', 0),
        (_dizoo_imports, 'import importlib\nimportlib.import_module("dizoo.classic_control")', 1),
        (_dizoo_imports, 'from dizoo.classic_control import envs', 1),
        (_dizoo_imports, 'ENVS = ["dizoo.classic_control.cartpole.envs"]', 1),
        (_dizoo_imports, 'HELP = "see dizoo/classic_control/cartpole/config"', 0),
        (_undeclared_deferred_imports, 'def f():\n    from ding.utils import x\n    from . import y', 2),
        (_undeclared_deferred_imports, 'def f():\n    from ding.utils import x  # deferred: imports torch', 0),
        (_undeclared_deferred_imports, 'def f():\n    import torch\n    import json', 0),
    ],
)
def test_each_check_finds_what_it_is_for(check, source, found):
    assert len(_check_source(check, source)) == found, _check_source(check, source)
