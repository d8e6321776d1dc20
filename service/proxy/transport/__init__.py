"""The proxy's transport: a lean HTTP/1.1 server (`httpserver`) and upstream client
(`upstream`) on asyncio and httptools, incremental SSE splitting (`sse`), bounds on what a
client can hold open (`connections`), and Unix sockets at any path (`unix_socket`)."""
