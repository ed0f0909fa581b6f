"""planner: the offline billing planner (`azsidecar plan`): from audit records and prices, what
each route would have cost and which routing settings to use (pure; no cluster, no S3).

Modules:
- `plan`: the plan's inputs, its arithmetic and its report (docs/planner.md).
"""
