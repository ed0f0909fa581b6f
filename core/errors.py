"""Kafka error codes the proxy and the agent use (Kafka's own numbering), which are
retriable, and after which a client refreshes its metadata: the one table of them."""

NONE = 0
UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NETWORK_EXCEPTION = 13
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87

# Clients retry these (kafka/common/errors/RetriableException subclasses).
RETRIABLE = frozenset({
    CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT, NETWORK_EXCEPTION, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR,
})


# Clients refresh metadata before retrying these (InvalidMetadataException subclasses, and
# NETWORK_EXCEPTION, after which Java's producer also asks again): the leader may have moved.
REFRESH_METADATA = frozenset({
    UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, NETWORK_EXCEPTION,
})


def is_retriable(error_code: int) -> bool:
    return error_code in RETRIABLE


class SidecarError(Exception):
    """Base of the sidecar's errors about work that did not complete. `retriable`: whether a
    later attempt may succeed (the client then gets a retriable Kafka error code); per class,
    or per instance through the keyword argument."""

    retriable: bool = True

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


def exception_is_retriable(exc: BaseException) -> bool:
    """A SidecarError's `retriable`; True for any other exception (an unforeseen failure is
    tried again rather than failed for good)."""
    return exc.retriable if isinstance(exc, SidecarError) else True
