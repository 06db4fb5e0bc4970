from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EOK: _ClassVar[StatusCode]
    ENOLEDGER: _ClassVar[StatusCode]
    ENOENTRY: _ClassVar[StatusCode]
    EBADREQ: _ClassVar[StatusCode]
    EIO: _ClassVar[StatusCode]
    EUA: _ClassVar[StatusCode]
    EBADVERSION: _ClassVar[StatusCode]
    EFENCED: _ClassVar[StatusCode]
    EREADONLY: _ClassVar[StatusCode]
    ETOOMANYREQUESTS: _ClassVar[StatusCode]

class AddFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADD_NONE: _ClassVar[AddFlag]
    RECOVERY_ADD: _ClassVar[AddFlag]

class ReadFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_NONE: _ClassVar[ReadFlag]
    FENCE_LEDGER: _ClassVar[ReadFlag]

class BookieFeature(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FEATURE_NONE: _ClassVar[BookieFeature]
    BATCHED_ENTRIES: _ClassVar[BookieFeature]
    ADD_STREAM: _ClassVar[BookieFeature]
    PULL_ENTRIES: _ClassVar[BookieFeature]
    PULL_DIGEST_TYPES: _ClassVar[BookieFeature]

class BookieInfoFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INFO_NONE: _ClassVar[BookieInfoFlag]
    TOTAL_DISK_CAPACITY: _ClassVar[BookieInfoFlag]
    FREE_DISK_SPACE: _ClassVar[BookieInfoFlag]
EOK: StatusCode
ENOLEDGER: StatusCode
ENOENTRY: StatusCode
EBADREQ: StatusCode
EIO: StatusCode
EUA: StatusCode
EBADVERSION: StatusCode
EFENCED: StatusCode
EREADONLY: StatusCode
ETOOMANYREQUESTS: StatusCode
ADD_NONE: AddFlag
RECOVERY_ADD: AddFlag
READ_NONE: ReadFlag
FENCE_LEDGER: ReadFlag
FEATURE_NONE: BookieFeature
BATCHED_ENTRIES: BookieFeature
ADD_STREAM: BookieFeature
PULL_ENTRIES: BookieFeature
PULL_DIGEST_TYPES: BookieFeature
INFO_NONE: BookieInfoFlag
TOTAL_DISK_CAPACITY: BookieInfoFlag
FREE_DISK_SPACE: BookieInfoFlag

class AddRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "master_key", "body", "flags")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    flags: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ..., flags: _Optional[int] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class AddEntriesResponse(_message.Message):
    __slots__ = ("status", "entries_written", "bytes_written", "failed_entry_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    FAILED_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    entries_written: int
    bytes_written: int
    failed_entry_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., entries_written: _Optional[int] = ..., bytes_written: _Optional[int] = ..., failed_entry_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "flags", "master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., flags: _Optional[int] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "entry_id", "body", "lac", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    entry_id: int
    body: bytes
    lac: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., body: _Optional[bytes] = ..., lac: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadRangeRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "last_entry_id", "ensemble_size", "write_quorum", "bookie_index", "max_batch_bytes")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUORUM_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    ensemble_size: int
    write_quorum: int
    bookie_index: int
    max_batch_bytes: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., write_quorum: _Optional[int] = ..., bookie_index: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class AddBatch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AddRequest]
    def __init__(self, entries: _Optional[_Iterable[_Union[AddRequest, _Mapping]]] = ...) -> None: ...

class AddAck(_message.Message):
    __slots__ = ("status", "entries_written", "bytes_written", "failed_entry_id", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    FAILED_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    entries_written: int
    bytes_written: int
    failed_entry_id: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., entries_written: _Optional[int] = ..., bytes_written: _Optional[int] = ..., failed_entry_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadBatch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ReadResponse]
    def __init__(self, entries: _Optional[_Iterable[_Union[ReadResponse, _Mapping]]] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key", "source_bookie_id", "first_entry_id", "last_entry_id", "ensemble_size", "write_quorum", "bookie_index", "digest_type")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUORUM_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TYPE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    source_bookie_id: str
    first_entry_id: int
    last_entry_id: int
    ensemble_size: int
    write_quorum: int
    bookie_index: int
    digest_type: int
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., source_bookie_id: _Optional[str] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., write_quorum: _Optional[int] = ..., bookie_index: _Optional[int] = ..., digest_type: _Optional[int] = ...) -> None: ...

class PullFailure(_message.Message):
    __slots__ = ("entry_id", "reason")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    reason: str
    def __init__(self, entry_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class PullProgress(_message.Message):
    __slots__ = ("status", "stored_entry_ids", "bytes_stored", "failed", "done", "source_status", "message", "failed_entry_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STORED_ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_STORED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILED_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    stored_entry_ids: _containers.RepeatedScalarFieldContainer[int]
    bytes_stored: int
    failed: _containers.RepeatedCompositeFieldContainer[PullFailure]
    done: bool
    source_status: str
    message: str
    failed_entry_id: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., stored_entry_ids: _Optional[_Iterable[int]] = ..., bytes_stored: _Optional[int] = ..., failed: _Optional[_Iterable[_Union[PullFailure, _Mapping]]] = ..., done: _Optional[bool] = ..., source_status: _Optional[str] = ..., message: _Optional[str] = ..., failed_entry_id: _Optional[int] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "lac", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    lac: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., lac: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetBookieInfoRequest(_message.Message):
    __slots__ = ("requested",)
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    requested: int
    def __init__(self, requested: _Optional[int] = ...) -> None: ...

class GetBookieInfoResponse(_message.Message):
    __slots__ = ("status", "total_disk_capacity", "free_disk_space", "features", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_SPACE_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    total_disk_capacity: int
    free_disk_space: int
    features: int
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., total_disk_capacity: _Optional[int] = ..., free_disk_space: _Optional[int] = ..., features: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetListOfEntriesOfLedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class EntryRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class GetListOfEntriesOfLedgerResponse(_message.Message):
    __slots__ = ("status", "ledger_id", "ranges", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    ledger_id: int
    ranges: _containers.RepeatedCompositeFieldContainer[EntryRange]
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., ledger_id: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[EntryRange, _Mapping]]] = ..., message: _Optional[str] = ...) -> None: ...
