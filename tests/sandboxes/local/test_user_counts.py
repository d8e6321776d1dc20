"""Splitting the server's per-user kernel limits among its sandboxes (`user_counts`)."""

from __future__ import annotations

from pathlib import Path

from service.sandboxes.local.user_counts import sandbox_shares


def test_each_limit_is_split_with_one_share_left_for_the_server(tmp_path: Path) -> None:
    (tmp_path / "max_inotify_instances").write_text("128\n")
    (tmp_path / "max_inotify_watches").write_text("192536\n")
    (tmp_path / "max_fanotify_groups").write_text("5\n")

    shares = sandbox_shares(8, tmp_path)

    # a kernel without fanotify's marks limit has none to split; a small pool gives one each
    assert shares == {
        "max_inotify_instances": 14,
        "max_inotify_watches": 21392,
        "max_fanotify_groups": 1,
    }
