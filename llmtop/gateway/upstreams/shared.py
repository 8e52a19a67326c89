"""Limits shared by several gateways: one small interface, a local and a Redis implementation.

`RedisLimits` holds the global concurrency and KV budget as leases that expire `ttl_s` after
their last renewal (a dead gateway's room comes back); one atomic Lua script grants, renews and
counts the live and draining gateways. Admission sees only its share. Redis away: fallback.py.
Docs: docs/gateway.md, "Past one engine and one process".
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

from yarl import URL

from llmtop.errors import UsageError
from llmtop.gateway.admission.controller import LEVERS, AdmissionController, LimitError
from llmtop.gateway.upstreams.fallback import Fallback, Lives, Rejoin, fallback_share

RENEW_S = 0.25
"""A record is renewed at least this often (and at once when the demand changes)."""
ASK_S = 0.01
"""While a gateway wants more than Redis had free, it asks again this often rather than at
every arrival and completion (each ask is a round trip on the gateway's own event loop)."""
DEFAULT_TTL_S = 3.0
REDIS_TIMEOUT_S = 0.5
"""A Redis call slower than this counts as Redis unreachable."""

# KEYS: the records hash, the expiry zset, the config hash.
# ARGV: id, want_s, want_b, floor_s, floor_b, cap_s, cap_b (-1: none), ttl_ms, draining (1: yes).
# A record is 'held_s held_b want_s want_b draining' (an older gateway's has no 5th field).
# Returns {grant_s, grant_b (-1: none), live gateways, held_s total, held_b total, config version,
# the other gateways draining}.
SYNC_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, g in ipairs(dead) do redis.call('HDEL', KEYS[1], g) end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
local id = ARGV[1]
local want_s, want_b = tonumber(ARGV[2]), tonumber(ARGV[3])
local floor_s, floor_b = tonumber(ARGV[4]), tonumber(ARGV[5])
local cap_s, cap_b = tonumber(ARGV[6]), tonumber(ARGV[7])
local held_s, held_b, live, waiting, draining = 0, 0, 1, 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= id then
    local hs, hb, ws, wb, d = string.match(all[i + 1], '(%d+) (%d+) (%d+) (%d+) ?(%d*)')
    hs, hb, ws, wb = tonumber(hs), tonumber(hb), tonumber(ws), tonumber(wb)
    held_s, held_b, live = held_s + hs, held_b + hb, live + 1
    if ws > hs or (cap_b >= 0 and wb > hb) then waiting = waiting + 1 end
    if d == '1' then draining = draining + 1 end
  end
end
local g_s = math.min(want_s, math.max(cap_s - held_s, 0))
if waiting > 0 then g_s = math.min(g_s, math.max(1, math.floor(cap_s / (waiting + 1)))) end
local r_s = math.max(g_s, floor_s)
local g_b, r_b = -1, floor_b
if cap_b >= 0 then
  g_b = math.min(want_b, math.max(cap_b - held_b, 0))
  if waiting > 0 then g_b = math.min(g_b, math.floor(cap_b / (waiting + 1))) end
  r_b = math.max(g_b, floor_b)
end
local mine = (ARGV[9] == '1') and '1' or '0'
redis.call('HSET', KEYS[1], id, r_s .. ' ' .. r_b .. ' ' .. want_s .. ' ' .. want_b .. ' ' .. mine)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[8]), id)
local ver = redis.call('HGET', KEYS[3], 'ver') or '0'
return {g_s, g_b, live, held_s + r_s, held_b + r_b, ver, draining}
"""


# KEYS: the tenant's bucket. ARGV: rpm. The token bucket of ratelimit.py, held in Redis: at most
# one second's worth of requests (at least one). Returns the wait in seconds ("0": go), a string.
RATE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate = tonumber(ARGV[1]) / 60
local cap = math.max(1, rate)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or cap
local at = tonumber(b[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
elseif rate <= 0 then
  wait = 86400
else
  wait = math.min((1 - tokens) / rate, 86400)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens),
           'at', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(math.min(cap / math.max(rate, 1e-9), 86400) * 1000) + 1000)
return string.format('%.6f', wait)
"""


class SharedLimits(Protocol):
    """What the app needs of shared limits."""

    backend: str
    slots: int | None
    """Requests this gateway may have in flight now (None: no shared cap)."""
    kv_blocks: int | None
    """KV blocks this gateway may have in flight now (None: no shared cap)."""

    async def run(self, ctl: AdmissionController, apply: Callable[[], None]) -> None: ...

    def begin_drain(self) -> None:
        """This gateway began to drain (SIGTERM): tell the others now."""

    async def publish(self, ctl: AdmissionController) -> None: ...

    async def rate_check(self, tenant: str, rpm: float) -> float | None: ...

    def admitted(self, key: int, now: float) -> None:
        """A request went to the engine (the controller's clock)."""

    def ended(self, key: int, now: float) -> None:
        """That request ended, whatever its outcome."""

    async def close(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


class LocalLimits:
    """One gateway alone: its limits are the whole; nothing to share or publish."""

    backend = "local"
    slots: int | None = None
    kv_blocks: int | None = None

    async def run(self, ctl: AdmissionController, apply: Callable[[], None]) -> None:
        return None

    def begin_drain(self) -> None:
        return None

    async def publish(self, ctl: AdmissionController) -> None:
        return None

    async def rate_check(self, tenant: str, rpm: float) -> float | None:
        return None  # admission's own token buckets decide

    def admitted(self, key: int, now: float) -> None:
        return None

    def ended(self, key: int, now: float) -> None:
        return None

    async def close(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"backend": "local", "status": "ok"}


class RedisLimits:
    """Global limits held in Redis (see the module docstring)."""

    backend = "redis"

    def __init__(self, url: str, *, prefix: str = "llmtop:", ttl_s: float = DEFAULT_TTL_S) -> None:
        try:  # the [redis] extra: without it, one line saying so
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
        except ImportError as e:
            raise UsageError(
                f"shared limits (--redis) need redis: pip install 'llmtop-console[redis]' ({e})"
            ) from None

        self.url = str(URL(url).with_password(None)) if "@" in url else url  # never shown
        self.ttl_s = ttl_s
        self.id = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._keys = [prefix + "leases", prefix + "lease_expiry", prefix + "config"]
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        self._sync = self._redis.register_script(SYNC_LUA)
        self._rate = self._redis.register_script(RATE_LUA)
        self._prefix = prefix
        self._wake = asyncio.Event()
        self._version = -1
        self.slots: int | None = 0
        """The slots this gateway may use now (its grant, or its share in fallback)."""
        self.kv_blocks: int | None = None
        self.connected: bool | None = None
        self.live = 1
        self.draining = False
        """This gateway is draining: its record says so from its next sync."""
        self.draining_peers: int | None = None
        """The other gateways whose records say they are draining, at the last sync (None:
        not known, Redis unanswered)."""
        self.global_in_flight: int | None = None
        self.global_kv_blocks: int | None = None
        self.last_error: str | None = None
        self.fallbacks = 0
        self._ctl: AdmissionController | None = None
        self._full = False
        """The last sync granted less than was wanted: nothing more was free."""
        self.lives = Lives()
        """The requests in flight here and the longest life lately (a fallback's rise)."""
        self._fallback: Fallback | None = None
        self._rejoin: Rejoin | None = None

    def wake(self) -> None:
        """The demand changed: sync now rather than at the next renewal, unless it only wants
        more of what Redis had none of a moment ago (then the ASK_S poll asks)."""
        ctl = self._ctl
        if (
            ctl is not None
            and self._full
            and self.connected
            and self.slots is not None
            and ctl.in_flight + ctl.queued >= self.slots
            and ctl.limits.max_inflight_kv_blocks is None
        ):
            return
        self._wake.set()

    def begin_drain(self) -> None:
        self.draining = True
        self._wake.set()

    async def run(self, ctl: AdmissionController, apply: Callable[[], None]) -> None:
        """Sync forever (cancelled by the app's lifespan): grant, renew, follow the limits."""
        ctl.on_demand = self.wake
        self._ctl = ctl
        apply()
        while True:
            self._wake.clear()  # before the call: a wake during it means sync again at once
            try:
                await self._once(ctl, apply)
            except Exception as e:  # any Redis failure means: fall back
                self._fall_back(ctl, e)
            apply()
            with_timeout = RENEW_S if self.connected else 2 * RENEW_S
            if self.connected and self._full:
                with_timeout = ASK_S
            # the timer wakes it, not wait_for: 3.11's wait_for returns when a wake and the
            # lifespan's cancel come at once, swallowing the cancel (the stop then hangs)
            timer = asyncio.get_running_loop().call_later(with_timeout, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()

    async def _once(self, ctl: AdmissionController, apply: Callable[[], None]) -> None:
        lim = ctl.limits
        want_s, want_b = ctl.demand()
        if self._rejoin is not None:
            want_s, want_b = self._rejoin.clamp(want_s, want_b)
        floor_s, floor_b = ctl.in_flight, ctl.in_flight_kv_blocks
        if self.slots is not None and want_s < self.slots:
            self.slots = want_s  # give back before Redis hears of it: never over the record
        kv_cap = lim.max_inflight_kv_blocks
        if kv_cap is not None and self.kv_blocks is not None and want_b < self.kv_blocks:
            self.kv_blocks = want_b
        apply()
        args: list[str | int] = [self.id, want_s, want_b, floor_s, floor_b, lim.max_concurrency]
        args += [-1 if kv_cap is None else kv_cap, int(self.ttl_s * 1000), int(self.draining)]
        res = await self._sync(keys=self._keys, args=args)
        g_s, g_b, live, held_s, held_b, ver, draining = (int(x) for x in res)
        if self.connected is False:
            self.last_error = None
        self.connected = True
        self._back(ctl.now(), live)
        self.live, self.global_in_flight, self.global_kv_blocks = live, held_s, held_b
        self.draining_peers = draining
        self.slots = g_s
        self.kv_blocks = None if g_b < 0 else g_b
        self._full = g_s < want_s or (g_b >= 0 and g_b < want_b)
        if ver != self._version:
            await self._follow(ctl, ver)

    async def _follow(self, ctl: AdmissionController, ver: int) -> None:
        """Apply the limits stored in Redis (a change made through another gateway); the
        first gateway to come up stores its own."""
        raw = await self._redis.hget(self._keys[2], "doc")
        if raw is None:
            await self.publish(ctl)
            return
        doc = json.loads(raw)
        limits = doc.get("limits", {})
        mine: dict[str, Any] = dict(ctl.limits.to_dict())
        changes = {k: v for k, v in limits.items() if k in mine and mine[k] != v}
        if mine["mode"] == "auto" and limits.get("mode") == "auto":
            for lever in LEVERS:  # each gateway's autopilot moves its own
                changes.pop(lever, None)
        if changes:
            try:
                ctl.set_limits(changes, source="redis")
            except LimitError as e:  # a newer gateway's limit, say: keep ours, say why
                self.last_error = f"limits in Redis not applied: {e.message}"
        paused = bool(doc.get("paused", False))
        if paused != ctl.paused:
            ctl.set_paused(paused, source="redis")
        self._version = ver

    async def publish(self, ctl: AdmissionController) -> None:
        """Store this gateway's limits and pause state for all (after an admin change)."""
        doc = json.dumps({"limits": ctl.limits.to_dict(), "paused": ctl.paused})
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._keys[2], "doc", doc)
                pipe.hincrby(self._keys[2], "ver", 1)
                _, ver = await pipe.execute()
            self._version = int(ver)
        except Exception as e:  # stays local until Redis is back
            self._fall_back(ctl, e)

    async def rate_check(self, tenant: str, rpm: float) -> float | None:
        """Charge the tenant's bucket held in Redis (shared by all gateways): 0.0 to go, else
        seconds to wait; None when Redis does not answer (admission's own buckets decide)."""
        if self.connected is False:
            return None
        try:
            wait = await self._rate(keys=[f"{self._prefix}rate:{tenant}"], args=[rpm])
        except Exception:  # Redis away: the sync loop notices and says so
            self.wake()
            return None
        return float(wait)

    def admitted(self, key: int, now: float) -> None:
        self.lives.admitted(key, now)

    def ended(self, key: int, now: float) -> None:
        self.lives.ended(key, now)

    def _fall_back(self, ctl: AdmissionController, e: BaseException) -> None:
        """Redis did not answer: hold what fallback.py allows now (from the grant held)."""
        now = ctl.now()
        if self.connected is not False:
            self.fallbacks += 1
        self.connected = False
        self.draining_peers = None
        self.last_error = f"redis unreachable: {type(e).__name__}: {e}"[:200]
        if self._fallback is None:
            longest = self.lives.longest_s(now)
            self._fallback = Fallback.begin(now, self.slots, self.kv_blocks, self.ttl_s, longest)
        lim = ctl.limits
        oldest = self.lives.oldest_admitted()
        self.slots, self.kv_blocks = self._fallback.limits(
            now, lim.max_concurrency, lim.max_inflight_kv_blocks, self.live, oldest
        )
        self._rejoin = Rejoin(self.slots, self.kv_blocks, self.live)  # the ask at the next answer

    def _back(self, now: float, live: int) -> None:
        """An answer from Redis: a fallback ends, and its rejoin lasts until the others are
        registered again (fallback.py)."""
        self._fallback = None
        rejoin = self._rejoin
        if rejoin is not None:
            if rejoin.until is None:
                rejoin.until = now + self.ttl_s
            if rejoin.over(now, live):
                self._rejoin = None

    async def close(self) -> None:
        """Give this gateway's room back at once (a clean stop), then close the client."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._keys[0], self.id)
                pipe.zrem(self._keys[1], self.id)
                await pipe.execute()
        except Exception:  # its lease expires within the TTL anyway
            pass
        await self._redis.aclose()

    def status(self) -> dict[str, Any]:
        """For /admin/stats (core.base.admin_api.SharedDoc)."""
        return {
            "backend": "redis",
            "status": "fallback" if self.connected is False else "ok",
            "url": self.url,
            "gateway_id": self.id,
            "live_gateways": self.live,
            "draining_gateways": self.draining_peers,
            "share_slots": self.slots,
            "share_kv_blocks": self.kv_blocks,
            "global_in_flight": self.global_in_flight,
            "global_kv_blocks": self.global_kv_blocks,
            "fallbacks": self.fallbacks,
            "last_error": self.last_error,
        }


__all__ = ["LocalLimits", "RedisLimits", "SharedLimits", "fallback_share"]
