// fencecheck stdio client over the npm `redlock` package (v4, the common Node Redlock) with
// ioredis: one Redlock over every master in FENCECHECK_ENDPOINTS. Protocol:
// docs/client-protocol.md. Redlock has no fencing token: every grant replies token null.
// Redlock's own retries are off (retryCount 0) and this loop retries until the request's
// timeout, so each reply can say when the winning attempt was sent (attempt_ns).
'use strict';
const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock');

const opts = JSON.parse(process.env.FENCECHECK_OPTIONS || '{}');
const opTimeoutMs = Math.round((opts.op_timeout_s || 1) * 1000);
const clients = process.env.FENCECHECK_ENDPOINTS.split(',').map((ep) => {
  const i = ep.lastIndexOf(':');
  return new Redis({
    host: ep.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(ep.slice(i + 1)),
    connectTimeout: opTimeoutMs, commandTimeout: opTimeoutMs,
    maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: false,
  });
});
// A master that is down only votes against; its errors are not this program's to report.
clients.forEach((c) => c.on('error', () => {}));
const redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0 });
const held = new Map(); // lock name -> redlock Lock

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = process.hrtime.bigint();
const sinceStart = () => Number(process.hrtime.bigint() - t0);

async function acquire(req, start) {
  const deadline = start + req.timeout_ms * 1e6;
  for (;;) {
    const attempt = sinceStart();
    try {
      const lock = await redlock.lock(req.lock, req.lease_ms);
      held.set(req.lock, lock);
      return { status: 'ok', token: null, attempt_ns: attempt - start };
    } catch (e) {
      if (!(e instanceof Redlock.LockError)) throw e;
      if (sinceStart() + 100e6 > deadline) return { status: 'fail', error: 'not-acquired' };
      await sleep(50 + Math.random() * 100);
    }
  }
}

async function handle(req, start) {
  const lock = held.get(req.lock);
  switch (req.op) {
    case 'acquire': return acquire(req, start);
    case 'renew':
      if (!lock) return { status: 'fail', error: 'not-held' };
      try {
        held.set(req.lock, await lock.extend(req.lease_ms));
        return { status: 'ok', token: null };
      } catch (e) {
        if (e instanceof Redlock.LockError) return { status: 'fail', error: 'not-held' };
        throw e;
      }
    case 'release':
      if (!lock) return { status: 'fail', error: 'not-held' };
      held.delete(req.lock);
      // redlock's unlock reports a failure when any master did not delete: the lock may still
      // sit on a minority until it expires, so the outcome is not definite.
      try { await lock.unlock(); return { status: 'ok' }; }
      catch (e) { return { status: 'info', error: 'unlock-partial' }; }
    case 'close':
      clients.forEach((c) => c.disconnect());
      process.exit(0);
    default: return { status: 'fail', error: `unknown op ${req.op}` };
  }
}

// One request at a time: the worker waits for each reply before it sends the next.
const queue = [];
let busy = false;
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const [req, start] = queue.shift();
    let reply;
    try { reply = await handle(req, start); }
    catch (e) { reply = { status: 'info', error: String(e && e.message || e).slice(0, 200) }; }
    process.stdout.write(JSON.stringify({ id: req.id, ...reply }) + '\n');
  }
  busy = false;
}
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  queue.push([JSON.parse(line), sinceStart()]);
  pump();
}).on('close', () => process.exit(0));
