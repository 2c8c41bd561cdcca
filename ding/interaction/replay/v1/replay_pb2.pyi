from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Field(_message.Message):
    __slots__ = ("name", "dtype", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("size", "fields")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    size: int
    fields: _containers.RepeatedCompositeFieldContainer[Field]
    def __init__(self, size: _Optional[int] = ..., fields: _Optional[_Iterable[_Union[Field, _Mapping]]] = ...) -> None: ...

class InsertRequest(_message.Message):
    __slots__ = ("batch", "collector_envstep")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_ENVSTEP_FIELD_NUMBER: _ClassVar[int]
    batch: Batch
    collector_envstep: int
    def __init__(self, batch: _Optional[_Union[Batch, _Mapping]] = ..., collector_envstep: _Optional[int] = ...) -> None: ...

class InsertResponse(_message.Message):
    __slots__ = ("count", "push_count")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PUSH_COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    push_count: int
    def __init__(self, count: _Optional[int] = ..., push_count: _Optional[int] = ...) -> None: ...

class SampleRequest(_message.Message):
    __slots__ = ("batch_size", "learner_iter", "batch_count")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEARNER_ITER_FIELD_NUMBER: _ClassVar[int]
    BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    learner_iter: int
    batch_count: int
    def __init__(self, batch_size: _Optional[int] = ..., learner_iter: _Optional[int] = ..., batch_count: _Optional[int] = ...) -> None: ...

class SampleResponse(_message.Message):
    __slots__ = ("ready", "batch", "replay_unique_id", "replay_buffer_idx", "is_weight", "count")
    READY_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    REPLAY_UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_BUFFER_IDX_FIELD_NUMBER: _ClassVar[int]
    IS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    batch: Batch
    replay_unique_id: _containers.RepeatedScalarFieldContainer[str]
    replay_buffer_idx: _containers.RepeatedScalarFieldContainer[int]
    is_weight: _containers.RepeatedScalarFieldContainer[float]
    count: int
    def __init__(self, ready: _Optional[bool] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., replay_unique_id: _Optional[_Iterable[str]] = ..., replay_buffer_idx: _Optional[_Iterable[int]] = ..., is_weight: _Optional[_Iterable[float]] = ..., count: _Optional[int] = ...) -> None: ...

class UpdatePrioritiesRequest(_message.Message):
    __slots__ = ("replay_unique_id", "replay_buffer_idx", "priority")
    REPLAY_UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_BUFFER_IDX_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    replay_unique_id: _containers.RepeatedScalarFieldContainer[str]
    replay_buffer_idx: _containers.RepeatedScalarFieldContainer[int]
    priority: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, replay_unique_id: _Optional[_Iterable[str]] = ..., replay_buffer_idx: _Optional[_Iterable[int]] = ..., priority: _Optional[_Iterable[float]] = ...) -> None: ...

class UpdatePrioritiesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("buffer_type", "count", "push_count", "encoding", "sample_count")
    BUFFER_TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PUSH_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    buffer_type: str
    count: int
    push_count: int
    encoding: Batch
    sample_count: int
    def __init__(self, buffer_type: _Optional[str] = ..., count: _Optional[int] = ..., push_count: _Optional[int] = ..., encoding: _Optional[_Union[Batch, _Mapping]] = ..., sample_count: _Optional[int] = ...) -> None: ...
