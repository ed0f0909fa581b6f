"""MSK IAM tokens for the agent's aiokafka client (SASL/OAUTHBEARER).

aiokafka asks its token provider once per connection's authentication; the token comes from
core/msk_iam.py's cache (signed anew after 80% of its life) in a worker thread, since signing
may ask the instance metadata service or STS. aiokafka does not re-authenticate (KIP-368):
when an MSK session ends, the broker closes the connection on its next request, before
handling it, so the append was not applied; KafkaAppender retries it, and aiokafka's new
connection authenticates with a fresh token.
"""

from __future__ import annotations

import asyncio

from aiokafka.abc import AbstractTokenProvider

from core.msk_iam import MskIamError, MskIamTokens
from leader_notify.agent.errors import KafkaAppendUnavailable


class AiokafkaMskIamTokens(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, tokens: MskIamTokens) -> None:
        self._tokens = tokens

    async def token(self) -> str:
        """The current token. Raises core.msk_iam.MskIamError when none can be signed."""
        return (await asyncio.to_thread(self._tokens.token)).value

    async def check(self) -> None:
        """Sign a token before the first connection, so missing credentials are one clear error.

        Raises KafkaAppendUnavailable naming the cause (aiokafka would log it per broker and
        report only that no broker answered).
        """
        try:
            await self.token()
        except MskIamError as exc:
            raise KafkaAppendUnavailable(f"upstream.aws_msk_iam_region {self._tokens.region}: {exc}") from exc
