"""The ``data`` of a learn task: the sample metadata the coordinator hands a learner for one demand."""

from __future__ import annotations

from typing import Any

from ding.utils.jsonable import to_jsonable
from ding.utils.learn_task_layout import COLUMNS_LAYOUT, JSON_SCALAR_TYPES


def learn_task_payload(demand: dict[str, Any], batches: list[list[dict[str, Any]]]) -> Any:
    """The JSON-ready ``data`` of the learn task that answers ``demand`` with ``batches`` (lists of metadata).

    The list of batches for a ``num_batches`` demand, else its one batch. Each batch is a list of metadata
    dicts (DI-engine's layout), or, for a demand that opts in to columns, one dict of the requested fields'
    columns: ``{field: [the value of each sample]}``, None where a sample lacks the field; a field that no
    sample has is left out.
    """
    fields = _requested_columns(demand)
    if fields is None:
        payload = to_jsonable(batches)
    else:
        payload = [_metadata_columns(batch, fields) for batch in batches]
    return payload if 'num_batches' in demand else payload[0]


def _requested_columns(demand: dict[str, Any]) -> list[str] | None:
    """The fields a demand asks for as columns; None for a demand without the opt-in (or a malformed one,
    which then gets the lists of dicts every learner understands)."""
    if demand.get('layout') != COLUMNS_LAYOUT:
        return None
    fields = demand.get('fields')
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
        return None
    return list(dict.fromkeys(fields))


def _metadata_columns(batch: list[dict[str, Any]], fields: list[str]) -> dict[str, list[Any]]:
    columns = {}
    for field in fields:
        column = [meta.get(field) for meta in batch]
        if batch and column.count(None) == len(column):
            continue  # no sample has it: left out, not a column of None
        if not set(map(type, column)) <= JSON_SCALAR_TYPES:  # e.g. numpy scalars
            column = to_jsonable(column)
        columns[field] = column
    return columns
