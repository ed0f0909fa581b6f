"""A produce-only sidecar's answer to a consumer's Fetch: an error, not a closed connection.

Strategy: without pass-through (proxy.broker_listeners off: a zone gateway, or turned off)
the proxy still advertises Fetch - librdkafka needs it to enable features of its producer
(proxy/versions.py, FEATURE_MARKERS). A consumer that assigns partitions itself (no group:
no JoinGroup, which it would find unsupported) then sends Fetch. Closing the connection,
as for an API not served, made librdkafka reconnect every second and report only "brokers
are down" (issue 21); answering every partition with an error code the consumer hands to
the application makes the cause show at once. The error is TOPIC_AUTHORIZATION_FAILED:
librdkafka and kafka-python report it to the application and do not retry it as a
transient fault, and "not allowed to read here" is what it means. The proxy logs the
reason (consumers need the cluster's bootstrap or pass-through) once per client.
"""

from __future__ import annotations

from kafka.protocol.consumer.fetch import FetchResponse

from kafka_protocol.fetch_request import decode_fetch_request

TOPIC_AUTHORIZATION_FAILED = 29  # Kafka's code: the client may not read these partitions


def refused_fetch(body: bytes, api_version: int) -> FetchResponse | None:
    """The answer to a Fetch the sidecar does not serve: every partition asked for gets
    TOPIC_AUTHORIZATION_FAILED (pure). None if the body does not decode (the caller closes
    the connection, as for any undecodable request).

    `body` is what the proxy's codec cut after the client id: for flexible versions it
    still starts with the request header's tagged fields.
    """
    request = decode_fetch_request(body, api_version)
    if request is None:
        return None
    topic_cls = FetchResponse.FetchableTopicResponse
    partition_cls = topic_cls.PartitionData
    return FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[topic_cls(topic=t.topic, topic_id=getattr(t, "topic_id", None), partitions=[
            partition_cls(partition_index=p.partition, error_code=TOPIC_AUTHORIZATION_FAILED, high_watermark=-1,
                          last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[],
                          preferred_read_replica=-1, records=b"")
            for p in t.partitions]) for t in request.topics])
