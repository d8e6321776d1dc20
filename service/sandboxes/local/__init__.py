"""The `local` backend: bubblewrap sandboxes on this host, the embedded default.

`backend` (the `SandboxBackend`) and `sandbox` (one sandbox) are the server's side;
`forkserver` and the `*_start`, `wire`, `mounts` and `seccomp` modules it imports run in
the fork server's own processes and use the standard library only, so this package's
`__init__` imports nothing.
"""
