"""A local S3-compatible server (moto) on the loopback for the URL tests (tests/test_url_input.py,
tests/test_hang_urls.py): started on a free port, the environment pointed at it while it runs, and fsspec's
per-process state reset on both sides (fsspec reads its `FSSPEC_*` variables once, at import, and caches a
file system per process: another test module may have run its own server first)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _forget_filesystems() -> None:
    import fsspec.config
    import s3fs

    fsspec.config.conf.pop("s3", None)
    fsspec.config.set_conf_env(fsspec.config.conf)
    s3fs.S3FileSystem.clear_instance_cache()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def s3_server(bucket: str) -> Iterator[tuple[dict[str, str], Any]]:
    """A running server with `bucket` made: the environment that reaches it, and an s3fs file system on it."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "FSSPEC_S3_ENDPOINT_URL": endpoint}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    _forget_filesystems()
    try:
        import s3fs

        storage = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
        storage.mkdir(bucket)
        yield env, storage
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
        _forget_filesystems()
