"""A real redis-server on a free loopback port for the shared-limits tests: found, else installed
(harness/system_tools.py); skip with the reason only when it cannot be had."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from harness.system_tools import system_binary
from llmtop.serve.stack import free_port


def redis_binary() -> str:
    return system_binary("redis-server")


class RedisServer:
    """One redis-server process, no persistence; `kill` and `start` again on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = redis_binary()
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:  # the port was taken meanwhile (another worker?)
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.kill()
        pytest.fail(f"redis-server did not answer on port {self.port} (exited or 10 s passed)")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
