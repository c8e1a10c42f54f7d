"""`RedisConn.execute` (workloads/clients/redis.py), the connection redis-setnx sends on, against a
real redis-server: a connection the server closed between two operations is made again before
the next command goes out, so that operation is answered instead of recorded as unknown."""

from __future__ import annotations

import time
import uuid

from fencecheck.workloads.clients.redis import SetnxClient
from tests.workloads.conftest import Server


def test_a_connection_the_server_closed_is_made_again_before_sending(
        redis_server: Server) -> None:
    client = SetnxClient({"endpoints": [redis_server.address], "op_timeout_s": 2.0})
    admin = redis_server.admin()
    try:
        client.release(client.acquire(f"lock-{uuid.uuid4().hex[:8]}", 1000, 1.0))
        # the server drops every client but admin (SKIPME), as a restarted server would
        assert admin.execute_command("CLIENT", "KILL", "TYPE", "normal") >= 1
        time.sleep(0.05)
        lock = f"lock-{uuid.uuid4().hex[:8]}"
        grant = client.acquire(lock, 1000, 1.0)  # not Indeterminate("connection-lost")
        assert grant.token == 1
        client.release(grant)
        assert admin.exists(f"fc:lock:{lock}") == 0
    finally:
        admin.close()
        client.close()
