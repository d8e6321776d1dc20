"""One model call, captured: `rewrite` (request rules) -> `relay` (upstream and back, in the
agent's dialect through `codec`, upstream failures as `failures`) -> `assembly`, `prompt_ids`,
`history` (the turn) -> `route` (a rollout's route, the turns it records), `tally` (which
calls a trainer can train on). `request_parse` and `json_shapes` read the agent's untrusted
requests."""
