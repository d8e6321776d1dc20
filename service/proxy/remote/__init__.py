"""The capture proxy inside a remote sandbox: `standalone` (the proxy as its own process),
`bundle` (its sources and libraries, packed), `placement` (where they lie in the sandbox)
and `in_sandbox` (placed, started, followed live, stopped)."""
