"""``create_model``: build a registered model from a config dict."""

from __future__ import annotations

import copy
from typing import Any

import torch.nn as nn

from ding.utils.registry import MODEL_REGISTRY, import_module


def create_model(cfg: dict[str, Any]) -> nn.Module:
    """Build ``MODEL_REGISTRY[cfg['type']](**rest)`` after importing ``cfg['import_names']``.

    The config is copied, so the caller's dict keeps its ``type`` and ``import_names``.
    """
    cfg = dict(copy.deepcopy(dict(cfg)))
    if 'type' not in cfg:
        raise KeyError(
            f"create_model: model config needs a 'type' key (one of {MODEL_REGISTRY.query()}), got keys {sorted(cfg)}"
        )
    model_type = cfg.pop('type')
    import_module(cfg.pop('import_names', []))
    return MODEL_REGISTRY.build(model_type, **cfg)
