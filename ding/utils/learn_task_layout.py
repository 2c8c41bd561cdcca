"""The layout of a learn task's sample metadata, shared by the coordinator and the comm learner.

A learner's data demand may opt in to columns (docs/parallel.md): ``'layout': COLUMNS_LAYOUT`` with the
metadata ``fields`` it reads. Each batch of the learn task is then one dict of columns,
``{field: [the value of each sample]}``, instead of a list of dicts repeating every key: much less JSON to
encode and decode, and the learner builds one tensor per column. Standard library only (the coordinator
imports neither numpy nor torch for it).
"""

COLUMNS_LAYOUT = 'columns'
# What a metadata column may hold: JSON scalars (None for a sample that lacks the field)
JSON_SCALAR_TYPES = frozenset((str, int, float, bool, type(None)))

__all__ = ['COLUMNS_LAYOUT', 'JSON_SCALAR_TYPES']
