"""Zones are AZ ids (use1-az1), never AZ names (us-east-1a): the check every zone setting gets.

AWS maps AZ names to physical zones per account, so "us-east-1a" in one account may be
another building than "us-east-1a" in the next; the AZ id names the same physical zone in
every account, and MSK reports it as each broker's rack. A proxy and an agent compare zones
by string, so a name where an id is expected silently routes nothing the way it should.

Strategy: refuse what is recognisably an AZ name, with the explanation; accept the rest.
Other labels stay allowed on purpose: clusters outside AWS (and the test systems) name
their racks freely, and the sidecar only needs zones to agree with each other and with the
brokers' racks.
"""

from __future__ import annotations

import re

# The id: the region's short code (use1, euc1, apne1, usgw1), "-az", a number; a Local Zone
# has its location between them (usw2-lax1-az1).
AZ_ID_RE = re.compile(r"^[a-z]{2,5}[0-9]+(?:-[a-z]+[0-9]+)?-az[0-9]+$")
# The name: the region (us-east-1, us-gov-west-1) and a letter; a Local Zone's name has its
# location before the letter (us-west-2-lax-1a).
AZ_NAME_RE = re.compile(r"^[a-z]{2}(?:-gov)?-[a-z]+-[0-9]+(?:-[a-z]+-[0-9]+)?[a-z]$", re.IGNORECASE)

AZ_NAME_HELP = ("is an AZ name, not an AZ id: give the id (the use1-az1 form: the region's short code, '-az', a "
                "number). AZ names are assigned per AWS account, so one name can be different physical zones in two "
                "accounts; AZ ids are the same everywhere, and MSK reports them as the brokers' racks. "
                "`aws ec2 describe-availability-zones --query 'AvailabilityZones[].[ZoneName,ZoneId]'` lists both")


def zone_problem(zone: str) -> str | None:
    """What is wrong with `zone` as a zone setting (said after the value), or None if nothing."""
    if AZ_NAME_RE.match(zone):
        return AZ_NAME_HELP
    if zone != zone.lower() and AZ_ID_RE.match(zone.lower()):
        return f"is an AZ id in upper case: AZ ids and the brokers' racks are lower case ({zone.lower()!r})"
    return None
