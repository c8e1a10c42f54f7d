// What the two ShedLock clients share (shedlock/, the Redis provider; shedlock-jdbc/, the JDBC
// one): ShedLock's semantics on the protocol, whatever the LockProvider:
//   acquire  LockProvider.lock(LockConfiguration(now, lock, lockAtMostFor = lease_ms,
//            lockAtLeastFor = the client option lock_at_least_ms, default 0)), tried again
//            every 50 ms until timeout_ms (a scheduler tick that finds it taken skips; the
//            worker's next tick is the next try);
//   renew    refused ("not-renewable"): these providers cannot extend a lock, a job runs under
//            its lockAtMostFor alone;
//   release  SimpleLock.unlock(): the lock lives on until lockAtLeastFor has passed, else it is
//            given up.
// ShedLock has no fencing token: every grant replies token null. The builds copy this folder
// into the two clients' build folders beside the stdio library (workloads/clients/build.py).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.core.SimpleLock;

final class ShedLockJobs {
    private final Map<String, SimpleLock> held = new HashMap<>();
    private final LockProvider provider;
    private final long lockAtLeastMs;
    private final Supplier<ObjectNode> refusal; // asked before an acquire: a refusing reply, or null

    ShedLockJobs(LockProvider provider, long lockAtLeastMs, Supplier<ObjectNode> refusal) {
        this.provider = provider;
        this.lockAtLeastMs = lockAtLeastMs;
        this.refusal = refusal;
    }

    private ObjectNode acquire(JsonNode req, long start) throws InterruptedException {
        ObjectNode refused = refusal.get();
        if (refused != null) {
            return refused;
        }
        String name = req.get("lock").asText();
        long deadline = start + req.get("timeout_ms").asLong() * 1_000_000L;
        Duration atMost = Duration.ofMillis(req.get("lease_ms").asLong());
        Duration atLeast = Duration.ofMillis(Math.min(lockAtLeastMs, atMost.toMillis()));
        for (;;) {
            long attempt = System.nanoTime();
            Optional<SimpleLock> lock =
                provider.lock(new LockConfiguration(Instant.now(), name, atMost, atLeast));
            if (lock.isPresent()) {
                held.put(name, lock.get());
                return Stdio.reply("ok").putNull("token").put("attempt_ns", attempt - start);
            }
            if (System.nanoTime() + 100_000_000L > deadline) {
                return Stdio.failed("fail", "locked");
            }
            Thread.sleep(50);
        }
    }

    ObjectNode handle(JsonNode req, long start) throws InterruptedException {
        String op = req.get("op").asText();
        SimpleLock lock = held.get(req.path("lock").asText());
        switch (op) {
            case "acquire":
                return acquire(req, start);
            case "renew":
                return Stdio.failed("fail", lock == null ? "not-held" : "not-renewable");
            case "release":
                if (lock == null) {
                    return Stdio.failed("fail", "not-held");
                }
                held.remove(req.get("lock").asText());
                lock.unlock();
                return Stdio.reply("ok");
            case "close":
                System.exit(0);
                return null;
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }
}
