"""leader_placement: move partition leaders to the zone their produce bytes come from.

- `leader_placement.plan`: the pure planner (moves, savings, the reassignment JSON);
- `leader_placement.plan_file`: the reviewed plan, saved and read back (pure);
- `leader_placement.audit_input`: its input from audit records (pure sums, a thin reader);
- `leader_placement.applied`: earlier applies from their leader_move records, and which were undone (pure);
- `leader_placement.apply`: the batch steps and checks (pure) and the loop that runs them;
- `leader_placement.admin`: the Kafka Admin API behind the loop (kafka-python).
`azsidecar plan leaders` wires them (docs/leader-placement.md).
"""
