"""Pipelines and the CLI. Names resolve lazily so ``import ding.entry`` stays cheap."""

from ding.utils.lazy_import import lazy_exports

_EXPORTS = {
    'serial_pipeline': '.serial_entry',
    'serial_pipeline_onpolicy': '.serial_entry_onpolicy',
    'eval': '.application_entry',
    'parallel_pipeline': '.parallel_entry',
    'async_pipeline': '.async_entry',
    'seed_pipeline': '.seed_entry',
    'es_pipeline': '.es_entry',
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
