"""Pipelines and the CLI. Names resolve lazily so ``import ding.entry`` stays cheap."""
from importlib import import_module as _import

_EXPORTS = {
    'serial_pipeline': '.serial_entry',
    'serial_pipeline_onpolicy': '.serial_entry_onpolicy',
    'eval': '.application_entry',
    'parallel_pipeline': '.parallel_entry',
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(_import(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ding.entry' has no attribute '{name}'")
