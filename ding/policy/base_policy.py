"""The ``Policy`` base: one object, several modes (learn / collect / eval / command).

A concrete algorithm overrides the ``_init_<mode>`` and ``_forward_<mode>`` methods; the
``learn_mode``, ``collect_mode``, ``eval_mode`` and ``command_mode`` properties hand out small
objects that expose only what that side of the pipeline may call.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from easydict import EasyDict

from ding.config.merge import deep_merge_dicts
from ding.utils.pytorch_ddp_dist_helper import broadcast_module, get_world_size, grad_sync_dtype
from ding.utils.pytorch_ddp_dist_helper import sync_gradients as sync_gradients_over_ranks
from ding.utils.pytorch_ddp_overlap import OverlappedGradientSync
from ding.utils.registry import MODEL_REGISTRY, import_module

_MODES = ('learn', 'collect', 'eval', 'command')


class _PolicyMode:
    """A read-only view of a policy exposing the callables of one mode."""

    def __init__(self, policy: Policy, members: dict[str, Callable]) -> None:
        self._policy = policy
        self._names = tuple(members)
        self.__dict__.update(members)

    def __repr__(self) -> str:
        return f'<{type(self._policy).__name__} mode: {", ".join(self._names)}>'

    if TYPE_CHECKING:
        # The members are set per instance; to a type checker each is a callable of the policy.
        def __getattr__(self, name: str) -> Callable[..., Any]: ...


class Policy(ABC):
    """Base class of every algorithm. ``config`` holds the algorithm's defaults."""

    _model: torch.nn.Module  # absent on a command-only policy, which has no model
    _optimizer: torch.optim.Optimizer  # set by the learn mode of the algorithms that train
    # backward_and_sync_gradients on several ranks: True overlaps the all-reduces with the backward (buckets), False
    # runs one flat all-reduce after it. Equal results; flat was as fast or faster on 2 cores with
    # little other load (benchmarks/NOTES.md, "#13 overlapping the all-reduce"), so it is the default.
    # policy.learn.overlap_gradient_sync sets it per policy.
    overlap_gradient_sync: bool = False
    # policy.learn.grad_sync_dtype: the dtype the gradient all-reduces carry (None: the gradients' own, lossless)
    _grad_sync_dtype: torch.dtype | None = None
    # (model, its gradient hooks): made at the first overlapped backward_and_sync_gradients
    _gradient_sync: tuple[torch.nn.Module, OverlappedGradientSync] | None = None

    config = dict(
        type='base',
        cuda=False,
        on_policy=False,
        priority=False,
        priority_IS_weight=False,
        model=dict(),
        learn=dict(),
        collect=dict(),
        eval=dict(),
        other=dict(),
    )

    @classmethod
    def default_config(cls) -> EasyDict:
        cfg = EasyDict(copy.deepcopy(cls.config))
        cfg.cfg_type = cls.__name__ + 'Dict'
        return cfg

    def __init__(self, cfg: dict, model: torch.nn.Module | None = None, enable_field: list[str] | None = None) -> None:
        # The algorithm's defaults under the user's values, so a partial config works everywhere.
        self._cfg = deep_merge_dicts(type(self).default_config(), cfg)
        self._read_gradient_sync_settings(self._cfg.get('learn') or {})
        self._on_policy = self._cfg.get('on_policy', False)
        self._enable_field = list(_MODES) if enable_field is None else list(enable_field)
        unknown = [f for f in self._enable_field if f not in _MODES]
        if unknown:
            raise ValueError(f'policy enable_field: unknown mode(s) {unknown}; valid modes are {list(_MODES)}')
        self._cuda = bool(self._cfg.get('cuda', False)) and torch.cuda.is_available()
        self._device = torch.device('cuda' if self._cuda else 'cpu')
        if set(self._enable_field) - {'command'}:
            self._model = self._create_model(self._cfg, model)
            if self._cuda:
                self._model.to(self._device)
            # Data parallel: every rank's learner starts from rank 0's weights (before _init_learn copies target
            # networks). Only learn-enabled policies take part: a collect/eval-only copy on one rank must not block.
            if 'learn' in self._enable_field and get_world_size() > 1:
                broadcast_module(self._model, src=0)
        self._modes: dict[str, _PolicyMode] = {}
        for field in self._enable_field:
            getattr(self, f'_init_{field}')()

    def _read_gradient_sync_settings(self, learn: dict) -> None:
        """``learn.grad_sync_dtype`` and ``learn.overlap_gradient_sync``, checked before anything is built."""
        self._grad_sync_dtype = grad_sync_dtype(learn.get('grad_sync_dtype'), 'policy.learn.grad_sync_dtype')
        overlap = learn.get('overlap_gradient_sync')
        if overlap is not None:
            if not isinstance(overlap, bool):
                raise ValueError(f'policy.learn.overlap_gradient_sync must be True or False, got {overlap!r}')
            self.overlap_gradient_sync = overlap

    # ---- model ---------------------------------------------------------------------------------
    def _create_model(self, cfg: EasyDict, model: torch.nn.Module | None) -> torch.nn.Module:
        if model is not None:
            return model
        model_cfg = copy.deepcopy(dict(cfg.get('model', {})))
        model_type = model_cfg.pop('type', None)
        import_names = model_cfg.pop('import_names', [])
        if model_type is None:
            model_type, import_names = self.default_model()
        import_module(import_names)
        return MODEL_REGISTRY.build(model_type, **model_cfg)

    def default_model(self) -> tuple[str, list[str]]:
        """(model registry name, modules to import) used when ``cfg.model.type`` is absent."""
        raise NotImplementedError(f'{type(self).__name__} needs cfg.model.type or a default_model()')

    def sync_gradients(self, model: torch.nn.Module, weight: float = 1.0) -> None:
        """Average ``model``'s gradients over the ranks, weighted by ``weight`` (this rank's sample count).

        Called between ``backward()`` and gradient clipping / the optimizer step; a no-op in a single process.
        ``backward_and_sync_gradients`` does both and overlaps the all-reduce with the backward. The all-reduce
        carries ``policy.learn.grad_sync_dtype`` (lossless by default).
        """
        sync_gradients_over_ranks(model.parameters(), weight, comm_dtype=self._grad_sync_dtype)

    def backward_and_sync_gradients(self, loss: torch.Tensor, model: torch.nn.Module, weight: float = 1.0) -> None:
        """``loss.backward()``, leaving ``model``'s gradients averaged over the ranks, weighted by ``weight``.

        The same result as ``backward()`` then ``sync_gradients(model, weight)`` (what it runs by default); with
        ``overlap_gradient_sync`` the all-reduces run while the backward does (``OverlappedGradientSync``). Call it
        before clipping and the optimizer step. In a single process it is ``loss.backward()``.
        """
        if get_world_size() == 1 or not self.overlap_gradient_sync:
            loss.backward()
            self.sync_gradients(model, weight)
            return
        if self._gradient_sync is None or self._gradient_sync[0] is not model:
            if self._gradient_sync is not None:
                self._gradient_sync[1].stop()
            self._gradient_sync = (model, OverlappedGradientSync(model.parameters(), comm_dtype=self._grad_sync_dtype))
        with self._gradient_sync[1].averaging(weight):
            loss.backward()

    # ---- mode initialisers (override the ones the algorithm supports) --------------------------
    @abstractmethod
    def _init_learn(self) -> None: ...

    @abstractmethod
    def _init_collect(self) -> None: ...

    @abstractmethod
    def _init_eval(self) -> None: ...

    def _init_command(self) -> None:
        pass

    # ---- forwards -------------------------------------------------------------------------------
    @abstractmethod
    def _forward_learn(self, data: Any) -> dict[str, Any] | list[dict[str, Any]]:
        """One training iteration on ``data`` (a list of samples or an already collated batch).

        Returns scalars to log; a ``priority`` entry (one value per sample) feeds prioritized replay. Several
        optimizer steps on one batch return one dict per step (the learner counts each as an iteration).
        """

    @abstractmethod
    def _forward_collect(self, data: dict[int, Any], **kwargs: Any) -> dict[int, dict[str, Any]]:
        """Map ``{env_id: obs}`` to ``{env_id: {'action': ..., ...}}``."""

    @abstractmethod
    def _forward_eval(self, data: dict[int, Any]) -> dict[int, dict[str, Any]]: ...

    @abstractmethod
    def _process_transition(self, obs: Any, policy_output: dict[str, Any], timestep: Any) -> dict[str, Any]:
        """Build one transition dict from an observation, the policy output and the env timestep."""

    @abstractmethod
    def _get_train_sample(self, transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Turn a trajectory (list of transitions) into training samples (n-step, GAE, ...)."""

    # ---- defaults shared by most algorithms -----------------------------------------------------
    def _reset_learn(self, data_id: list[int] | None = None) -> None:
        pass

    def _reset_collect(self, data_id: list[int] | None = None) -> None:
        pass

    def _reset_eval(self, data_id: list[int] | None = None) -> None:
        pass

    def _monitor_vars_learn(self) -> list[str]:
        return ['cur_lr', 'total_loss']

    def _state_dict_learn(self) -> dict[str, Any]:
        state = {'model': self._model.state_dict()}
        optimizer = getattr(self, '_optimizer', None)
        if optimizer is not None:
            state['optimizer'] = optimizer.state_dict()
        return state

    def _load_state_dict_learn(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'])
        optimizer = getattr(self, '_optimizer', None)
        if 'optimizer' in state_dict and optimizer is not None:
            optimizer.load_state_dict(state_dict['optimizer'])

    def _state_dict_collect(self) -> dict[str, Any]:
        return {'model': self._model.state_dict()}

    def _load_state_dict_collect(self, state_dict: dict[str, Any]) -> None:
        self._model.load_state_dict(state_dict['model'], strict=True)

    _state_dict_eval = _state_dict_collect
    _load_state_dict_eval = _load_state_dict_collect

    def _get_setting_collect(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_setting_learn(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_setting_eval(self, command_info: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _get_attribute(self, name: str) -> Any:
        if hasattr(self, '_' + name):
            return getattr(self, '_' + name)
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

    def _set_attribute(self, name: str, value: Any) -> None:
        setattr(self, '_' + name, value)

    def _info(self) -> str:
        model = getattr(self, '_model', None)
        return f'{type(self).__name__}(model={type(model).__name__ if model is not None else None})'

    # ---- mode views -----------------------------------------------------------------------------
    def _mode(self, field: str) -> _PolicyMode:
        view = self._modes.get(field)
        if view is None:
            if field not in self._enable_field:
                raise AttributeError(
                    f"{type(self).__name__}: mode '{field}' is not enabled (enable_field={self._enable_field})"
                )
            view = self._modes[field] = _PolicyMode(self, getattr(self, f'_{field}_mode_members')())
        return view

    def _learn_mode_members(self) -> dict[str, Callable]:
        return dict(
            forward=self._forward_learn,
            reset=self._reset_learn,
            info=self._info,
            monitor_vars=self._monitor_vars_learn,
            get_attribute=self._get_attribute,
            set_attribute=self._set_attribute,
            state_dict=self._state_dict_learn,
            load_state_dict=self._load_state_dict_learn,
        )

    def _collect_mode_members(self) -> dict[str, Callable]:
        return dict(
            forward=self._forward_collect,
            process_transition=self._process_transition,
            get_train_sample=self._get_train_sample,
            reset=self._reset_collect,
            info=self._info,
            get_attribute=self._get_attribute,
            set_attribute=self._set_attribute,
            state_dict=self._state_dict_collect,
            load_state_dict=self._load_state_dict_collect,
        )

    def _eval_mode_members(self) -> dict[str, Callable]:
        return dict(
            forward=self._forward_eval,
            reset=self._reset_eval,
            info=self._info,
            get_attribute=self._get_attribute,
            set_attribute=self._set_attribute,
            state_dict=self._state_dict_eval,
            load_state_dict=self._load_state_dict_eval,
        )

    def _command_mode_members(self) -> dict[str, Callable]:
        return dict(
            get_setting_learn=self._get_setting_learn,
            get_setting_collect=self._get_setting_collect,
            get_setting_eval=self._get_setting_eval,
        )

    @property
    def learn_mode(self) -> _PolicyMode:
        return self._mode('learn')

    @property
    def collect_mode(self) -> _PolicyMode:
        return self._mode('collect')

    @property
    def eval_mode(self) -> _PolicyMode:
        return self._mode('eval')

    @property
    def command_mode(self) -> _PolicyMode:
        return self._mode('command')

    def __repr__(self) -> str:
        return self._info()


class CommandModePolicy(Policy):
    """A policy that also has a command mode (the ``*_command`` registry entries)."""
