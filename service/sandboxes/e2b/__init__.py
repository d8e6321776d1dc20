"""The `e2b` backend: sandboxes in E2B's cloud through the `e2b` SDK (`backend`)."""
