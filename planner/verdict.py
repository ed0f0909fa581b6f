"""Go or no-go after a shadow run: does the WAL route save enough to switch it on?

The rule: **go** when the best deployment the plan priced (a mode, sidecar or gateway, on a
storage class) saves, net of its S3 requests and storage, at least GO_MIN_NET_SHARE of the
cross-zone transfer bill it replaces; **no-go** otherwise, and when the policy would have
sent nothing through the WAL. Why a share and not just "more than zero": the plan's net
savings from a mean-rate profile were off by up to -42 % on the runs whose net was 1.6-8.4 %
of the direct bill, and by -8..+5 % on the others (docs/planner.md, nine audited runs of
2026-11-26): below 10 % the prediction's error can be a large part of the saving itself.

The verdict is about money only: the WAL route adds latency (docs/latency-and-cost.md).
Pure: bills in, a verdict out; the command prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.plan import Bill

GO_MIN_NET_SHARE = 0.10  # of the replaced transfer bill: above the plan's worst error on small nets
RULE = (f"rule: go when the best mode saves, net of S3 requests and storage, at least "
        f"{100 * GO_MIN_NET_SHARE:.0f} % of the cross-zone transfer it replaces")


@dataclass(frozen=True)
class ShadowVerdict:
    """The plan's answer for a shadow run, per month (730 h), in USD."""

    go: bool
    mode: str | None  # the best deployment's mode; None when no bytes would take the WAL route
    storage_class: str | None
    net_usd: float  # what that deployment saves against producing directly (negative: costs more)
    transfer_usd: float  # the cross-zone transfer bill of the bytes the policy would route through the WAL

    @property
    def net_share(self) -> float:
        return self.net_usd / self.transfer_usd if self.transfer_usd > 0 else 0.0

    def line(self) -> str:
        """One line: `go: ...` or `no-go: ...`, with the figures and the rule."""
        if self.mode is None:
            return f"no-go: the policy would have sent nothing across zones through the WAL, so nothing to save ({RULE})"
        best = f"{self.mode} on S3 {self.storage_class}"
        effect = (f"would save ${self.net_usd:,.2f}/month net" if self.net_usd >= 0
                  else f"would cost ${-self.net_usd:,.2f}/month more than producing directly")
        of = f"{100 * self.net_share:.1f} % of the ${self.transfer_usd:,.2f}/month transfer it replaces"
        if self.go:
            return f"go: {best} {effect}, {of} ({RULE})"
        return f"no-go: the best mode, {best}, {effect}, {of} ({RULE})"


def shadow_verdict(bills: Sequence[Bill]) -> ShadowVerdict:
    """The verdict on `bills` (planner.plan.plan of the bytes the policy would route through
    the WAL): the deployment with the largest net savings, judged by the rule above."""
    priced = [b for b in bills if b.mode != "direct"]
    transfer = max((b.direct_transfer_usd for b in bills), default=0.0)
    if not priced or transfer <= 0:
        return ShadowVerdict(False, None, None, 0.0, transfer)
    best = max(priced, key=lambda b: b.net_savings_usd)  # the first of equals: sidecar, then Standard
    return ShadowVerdict(best.net_savings_usd >= GO_MIN_NET_SHARE * best.direct_transfer_usd, best.mode,
                         best.storage_class, best.net_savings_usd, best.direct_transfer_usd)
