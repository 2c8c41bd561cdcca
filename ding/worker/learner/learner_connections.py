"""Where a parallel-mode learner's batches come from and where its weights and learn infos go
(``LearnerConnections``, a base of ``BaseLearner``): given as constructor arguments or with ``connect``; the
comm learner connects itself. The comm hooks (``SendPolicyHook``, ``SendLearnInfoHook``) call
``send_policy`` / ``send_learn_info`` / ``policy_publish_due`` on the learner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DataSource = Callable[[int], Any]  # batch_size -> one batch (a list of samples, or a collated dict)
PolicySink = Callable[[dict[str, Any]], None]  # {'model': state_dict, 'iter': policy_iter}
LearnInfoSink = Callable[[dict[str, Any]], None]  # one iteration's learn info


class LearnerConnections:
    """The data source and the sinks of a learner (none until connected)."""

    _data_source: DataSource | None = None
    _policy_sink: PolicySink | None = None
    _learn_info_sink: LearnInfoSink | None = None
    _publish_due: Callable[[], bool] | None = None

    def connect(
        self,
        data_source: DataSource | None = None,
        policy_sink: PolicySink | None = None,
        learn_info_sink: LearnInfoSink | None = None,
        publish_due: Callable[[], bool] | None = None,
    ) -> None:
        """Where ``start()`` gets its batches (``data_source(batch_size)``) and where the comm hooks send the
        weights (``policy_sink({'model', 'iter'})``) and learn infos (``learn_info_sink(info)``);
        ``publish_due()`` says whether weights sent now would be published. Arguments left None keep
        what was connected before. The comm learner connects itself in parallel mode."""
        if data_source is not None:
            self._data_source = data_source
        if policy_sink is not None:
            self._policy_sink = policy_sink
        if learn_info_sink is not None:
            self._learn_info_sink = learn_info_sink
        if publish_due is not None:
            self._publish_due = publish_due

    def get_data(self, batch_size: int) -> Any:
        """One batch from the connected data source (what the data loader reads)."""
        if self._data_source is None:
            raise RuntimeError('BaseLearner.get_data: no data source; pass data_source= or call connect() first')
        return self._data_source(batch_size)

    def send_policy(self, state_dict: dict[str, Any]) -> None:
        """Hand ``{'model', 'iter'}`` to the connected policy sink (``SendPolicyHook`` calls this)."""
        if self._policy_sink is None:
            raise RuntimeError('BaseLearner.send_policy: no policy sink; pass policy_sink= or call connect() first')
        self._policy_sink(state_dict)

    def send_learn_info(self, learn_info: dict[str, Any]) -> None:
        """Hand one learn info to the connected sink (``SendLearnInfoHook`` calls this)."""
        if self._learn_info_sink is None:
            raise RuntimeError(
                'BaseLearner.send_learn_info: no learn-info sink; pass learn_info_sink= or call connect() first'
            )
        self._learn_info_sink(learn_info)

    def policy_publish_due(self) -> bool:
        """Whether weights sent now would be published (True unless the connected sink throttles)."""
        return True if self._publish_due is None else self._publish_due()


__all__ = ['DataSource', 'PolicySink', 'LearnInfoSink', 'LearnerConnections']
