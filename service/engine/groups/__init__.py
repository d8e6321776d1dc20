"""Groups (GRPO): n samples of one task, set up once and forked copy-on-write, infrastructure
failures refilled and never scored.

`manager` (admission as a unit, watchers, cancel, restart) -> `run` (one group's life) ->
`members` (specs, seeds, what counts, statistics); set up once and snapshot is
`engine.template`, which sessions' copies share.
"""
