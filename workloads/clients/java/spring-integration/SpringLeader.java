// The leader modes of SpringLockClient: Spring Integration's LockRegistryLeaderInitiator over a
// lock registry, its candidate's onGranted/onRevoked followed, and each of its re-locks seen
// through a wrapper of the registry's locks (the initiator takes the lock again every
// heartbeat: that is its renewal). The protocol's mapping is in SpringLockClient.java.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import org.springframework.integration.leader.Candidate;
import org.springframework.integration.leader.Context;
import org.springframework.integration.support.leader.LockRegistryLeaderInitiator;
import org.springframework.integration.support.locks.DistributedLock;
import org.springframework.integration.support.locks.LockRegistry;

final class SpringLeader {
    private final LockRegistryLeaderInitiator initiator;
    private final long opTimeoutMs;
    private final Object changed = new Object();
    private boolean granted; // guarded by changed
    private long retakenAt = Long.MIN_VALUE; // nanoTime a successful re-lock was attempted
    private String unlockError; // what the registry's unlock threw, if anything

    SpringLeader(LockRegistry<DistributedLock> registry, JsonNode opts) {
        LockRegistry<Lock> watched = key -> new Watched(registry.obtain(key));
        initiator = new LockRegistryLeaderInitiator(watched, new Campaign());
        initiator.setHeartBeatMillis(opts.path("heartbeat_ms").asLong(500));
        initiator.setBusyWaitMillis(opts.path("busy_wait_ms").asLong(50));
        opTimeoutMs = Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000);
    }

    private final class Campaign implements Candidate {
        @Override
        public String getRole() {
            return "leader";
        }

        @Override
        public String getId() {
            return "fencecheck-w" + System.getenv().getOrDefault("FENCECHECK_WORKER", "0");
        }

        @Override
        public void onGranted(Context ctx) {
            synchronized (changed) {
                granted = true;
                changed.notifyAll();
            }
        }

        @Override
        public void onRevoked(Context ctx) {
            synchronized (changed) {
                granted = false;
                changed.notifyAll();
            }
        }
    }

    /** The registry's lock, with the time of each successful tryLock's attempt recorded. */
    private final class Watched implements Lock {
        private final Lock lock;

        Watched(Lock lock) {
            this.lock = lock;
        }

        @Override
        public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
            long attempt = System.nanoTime();
            boolean got = lock.tryLock(time, unit);
            if (got) {
                synchronized (changed) {
                    retakenAt = attempt;
                    changed.notifyAll();
                }
            }
            return got;
        }

        @Override
        public boolean tryLock() {
            long attempt = System.nanoTime();
            boolean got = lock.tryLock();
            if (got) {
                synchronized (changed) {
                    retakenAt = attempt;
                    changed.notifyAll();
                }
            }
            return got;
        }

        @Override
        public void unlock() {
            try {
                lock.unlock();
            } catch (RuntimeException e) {
                synchronized (changed) {
                    unlockError = SpringLockClient.said(e);
                }
                throw e;
            }
        }

        @Override
        public void lock() {
            lock.lock();
        }

        @Override
        public void lockInterruptibly() throws InterruptedException {
            lock.lockInterruptibly();
        }

        @Override
        public Condition newCondition() {
            return lock.newCondition();
        }
    }

    /** Waits until `done` holds or the deadline (nanoTime) passes; returns whether it held. */
    private boolean await(java.util.function.BooleanSupplier done, long deadline)
            throws InterruptedException {
        synchronized (changed) {
            while (!done.getAsBoolean()) {
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (left <= 0) {
                    return false;
                }
                changed.wait(left);
            }
            return true;
        }
    }

    ObjectNode handle(String op, JsonNode req, long start) throws InterruptedException {
        switch (op) {
            case "acquire": {
                initiator.start();
                long deadline = start + Math.max(0, req.get("timeout_ms").asLong() - 100) * 1_000_000L;
                if (!await(() -> granted, deadline)) {
                    initiator.stop();
                    return Stdio.failed("fail", "not-elected");
                }
                long attempt;
                synchronized (changed) {
                    attempt = retakenAt;
                }
                return Stdio.reply("ok").putNull("token").put("attempt_ns", Math.max(0, attempt - start));
            }
            case "renew": {
                // The initiator's next heartbeat re-lock, begun after this request was read.
                long deadline = start + Math.max(100, opTimeoutMs - 100) * 1_000_000L;
                boolean renewed = await(() -> !granted || retakenAt > start, deadline);
                synchronized (changed) {
                    if (!granted) {
                        ObjectNode r = Stdio.failed("fail", "not-leader");
                        r.putObject("evidence").put("revoked", true);
                        return r;
                    }
                }
                return renewed ? Stdio.reply("ok") : Stdio.failed("fail", "no-heartbeat");
            }
            case "release": {
                initiator.stop();
                long deadline = System.nanoTime() + opTimeoutMs * 1_000_000L;
                boolean revoked = await(() -> !granted, deadline);
                synchronized (changed) {
                    String error = unlockError;
                    unlockError = null;
                    if (error != null) {
                        ObjectNode r = Stdio.failed("fail", "lock-lost");
                        r.putObject("evidence").put("unlock_error", error);
                        return r;
                    }
                }
                return revoked ? Stdio.reply("ok") : Stdio.failed("info", "not-revoked");
            }
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }
}
