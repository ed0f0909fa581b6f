"""Kafka's names of its API keys, for metric labels and log lines (Kafka's own spelling).

From the Apache Kafka protocol guide; a key not listed is named by its number.
"""

from __future__ import annotations

API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
    34: "AlterReplicaLogDirs", 35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders", 44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments", 46: "ListPartitionReassignments", 47: "OffsetDelete",
    48: "DescribeClientQuotas", 49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 60: "DescribeCluster", 61: "DescribeProducers",
    65: "DescribeTransactions", 66: "ListTransactions", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
}


def api_name(api_key: int) -> str:
    """Kafka's name for `api_key`, or its number as text."""
    return API_NAMES.get(api_key, str(api_key))
