// A fencecheck stdio client (docs/client-protocol.md) over Hazelcast's Java client: the CP
// Subsystem's FencedLock (or the same API in unsafe mode, on a cluster without CP members).
//   acquire  tryLockAndGetFence(timeout): the token is the fence (INVALID_FENCE: not granted)
//   renew    a re-entrant tryLockAndGetFence(0) and one unlock(): both commit through the lock's
//            Raft group with our CP session, which refreshes the session (what keeps the lock)
//            from then; a different fence, none, or a lost session: not held
//   release  unlock()
// Every lock call runs on one thread of its own (a FencedLock belongs to a session and a
// thread), which the request loop waits for until the op's deadline (acquire: its timeout plus
// half a second; others: op_timeout_s); past it the reply is `info`. The lock is re-entrant, so
// after a call on a lock with an unknown outcome (a release that may not have happened, an
// acquire given up on that may yet be granted) the next acquire of it first lets go of every
// hold this client may have: otherwise it would be a re-entry, granted the same fence again.
// The client connects to its own member first (FENCECHECK_WORKER picks it) without smart
// routing, so each worker talks through one member, as Jepsen's clients do: a partition that
// splits the members splits the workers with them.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.hazelcast.client.HazelcastClient;
import com.hazelcast.client.config.ClientConfig;
import com.hazelcast.core.HazelcastInstance;
import com.hazelcast.cp.lock.FencedLock;
import com.hazelcast.cp.lock.exception.LockAcquireLimitReachedException;
import com.hazelcast.cp.lock.exception.LockOwnershipLostException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Level;
import java.util.logging.Logger;

public final class HazelcastLockClient {
    private static final Logger HZ_LOG = Logger.getLogger("com.hazelcast");
    private static final ExecutorService LOCK_THREAD = Executors.newSingleThreadExecutor();
    private static final Map<String, FencedLock> LOCKS = new HashMap<>();
    // Locks whose last call's outcome is unknown (touched on the lock thread only).
    private static final Set<String> DIRTY = new HashSet<>();
    private static final int MAX_HOLDS = 4;
    private static HazelcastInstance client;
    private static long opTimeoutMs;

    private HazelcastLockClient() {}

    private static HazelcastInstance client(JsonNode opts) {
        if (client == null) {
            List<String> eps = new ArrayList<>(Arrays.asList(System.getenv("FENCECHECK_ENDPOINTS").split(",")));
            int worker = Integer.parseInt(System.getenv().getOrDefault("FENCECHECK_WORKER", "0"));
            java.util.Collections.rotate(eps, -(worker % eps.size()));
            ClientConfig cfg = new ClientConfig();
            cfg.setClusterName(opts.path("cluster_name").asText("dev"));
            // A connection's connect and authentication get 5 s, not an op's 1 s (a member on a
            // loaded machine is slow to authenticate; calls have their own deadlines).
            cfg.getNetworkConfig().setAddresses(eps).setSmartRouting(false)
                .setConnectionTimeout((int) Math.max(5000, opTimeoutMs));
            // A lost member is noticed in seconds, not a minute; a call that cannot reach the
            // cluster gives up within the op's deadline rather than retrying for two minutes.
            cfg.setProperty("hazelcast.client.heartbeat.interval", "1000");
            cfg.setProperty("hazelcast.client.heartbeat.timeout", "5000");
            cfg.setProperty("hazelcast.client.invocation.timeout.seconds",
                String.valueOf(Math.max(2, (opTimeoutMs + 999) / 1000)));
            cfg.setProperty("hazelcast.phone.home.enabled", "false");
            cfg.setProperty("hazelcast.client.shuffle.member.list", "false"); // its own first
            client = HazelcastClient.newHazelcastClient(cfg);
        }
        return client;
    }

    // Called on the lock thread only (a proxy's first fetch commits to the CP Subsystem).
    private static FencedLock lock(JsonNode opts, String name) {
        return LOCKS.computeIfAbsent(name, n -> client(opts).getCPSubsystem().getLock("fencecheck-" + n));
    }

    // Let go of every hold this client may still have on a lock whose last call's outcome is
    // unknown; false if that could not be done (then the acquire is not sent).
    private static boolean settle(String name, FencedLock lock) {
        try {
            for (int i = 0; i < MAX_HOLDS && lock.isLockedByCurrentThread(); i++) {
                lock.unlock();
            }
        } catch (IllegalMonitorStateException e) { // incl. a lost session: nothing is held
            // settled
        } catch (RuntimeException e) {
            System.err.println("hazelcast-client: settle " + name + ": " + e);
            return false;
        }
        DIRTY.remove(name);
        return true;
    }

    private static ObjectNode acquire(String name, FencedLock lock, long timeoutMs,
                                      AtomicBoolean abandoned) {
        if (DIRTY.contains(name) && !settle(name, lock)) {
            return Stdio.failed("fail", "unsettled");
        }
        DIRTY.add(name); // until this call's outcome is known
        long fence;
        try {
            fence = lock.tryLockAndGetFence(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (LockAcquireLimitReachedException e) {
            return Stdio.failed("fail", "acquire-limit");
        } catch (LockOwnershipLostException e) { // an earlier grant's session is gone: not sent
            return Stdio.failed("fail", "lock-lost");
        }
        if (abandoned.get()) { // the worker stopped waiting: settled at its next acquire
            return Stdio.failed("info", "timeout");
        }
        DIRTY.remove(name);
        if (fence == FencedLock.INVALID_FENCE) {
            return Stdio.failed("fail", "timeout");
        }
        return Stdio.reply("ok").put("token", fence);
    }

    private static ObjectNode renew(String name, FencedLock lock, long token) {
        long fence;
        DIRTY.add(name); // until this call's outcome is known
        try {
            fence = lock.tryLockAndGetFence(0, TimeUnit.MILLISECONDS);
        } catch (IllegalMonitorStateException | LockAcquireLimitReachedException e) {
            return Stdio.failed("fail", "not-held");
        }
        if (fence == FencedLock.INVALID_FENCE) {
            return Stdio.failed("fail", "not-held");
        }
        lock.unlock(); // back to the hold count before (or none, if this took it anew)
        DIRTY.remove(name);
        return fence == token ? Stdio.reply("ok") : Stdio.failed("fail", "not-held");
    }

    private static ObjectNode release(String name, FencedLock lock) {
        DIRTY.add(name); // until this call's outcome is known
        try {
            lock.unlock();
        } catch (IllegalMonitorStateException e) { // incl. LockOwnershipLostException
            DIRTY.remove(name);
            return Stdio.failed("fail", "not-held");
        }
        DIRTY.remove(name);
        return Stdio.reply("ok");
    }

    private static ObjectNode onLockThread(Callable<ObjectNode> call, long deadlineMs,
                                           AtomicBoolean abandoned) throws Exception {
        Future<ObjectNode> f = LOCK_THREAD.submit(call);
        try {
            return f.get(deadlineMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            abandoned.set(true);
            return Stdio.failed("info", "timeout");
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
    }

    private static ObjectNode handle(JsonNode opts, JsonNode req) throws Exception {
        String op = req.get("op").asText();
        if (op.equals("close")) {
            if (client != null) {
                client.shutdown();
            }
            System.exit(0);
        }
        String name = req.get("lock").asText();
        AtomicBoolean abandoned = new AtomicBoolean();
        switch (op) {
            case "acquire":
                long timeoutMs = req.get("timeout_ms").asLong();
                return onLockThread(() -> acquire(name, lock(opts, name), timeoutMs, abandoned),
                    timeoutMs + 500, abandoned);
            case "renew":
                long token = req.get("token").asLong();
                return onLockThread(() -> renew(name, lock(opts, name), token), opTimeoutMs,
                    abandoned);
            case "release":
                return onLockThread(() -> release(name, lock(opts, name)), opTimeoutMs, abandoned);
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        HZ_LOG.setLevel(Level.WARNING);
        JsonNode opts = Stdio.options();
        opTimeoutMs = Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000);
        client(opts); // connected before the first request: a JVM start is not a lock call
        Stdio.serve((req, start) -> handle(opts, req), Stdio.unknown("hazelcast-client"));
    }
}
