// A fencecheck stdio client (docs/client-protocol.md) over ShedLock (net.javacrumbs.shedlock),
// the "run this scheduled job once" library, with its Redis provider (RedisLockProvider over
// Spring Data Redis and Jedis). ShedLock's semantics map onto the protocol as:
//   acquire  LockProvider.lock(LockConfiguration(now, lock, lockAtMostFor = lease_ms,
//            lockAtLeastFor = the client option lock_at_least_ms, default 0)), tried again
//            every 50 ms until timeout_ms (a scheduler tick that finds it taken skips; the
//            worker's next tick is the next try);
//   renew    refused ("not-renewable"): this provider cannot extend a lock, a job runs under its
//            lockAtMostFor alone;
//   release  SimpleLock.unlock(): the key lives on until lockAtLeastFor has passed, else it is
//            deleted.
// ShedLock has no fencing token: every grant replies token null.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.redis.spring.RedisLockProvider;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.jedis.JedisClientConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;

public final class ShedLockClient {
    private static final Map<String, SimpleLock> HELD = new HashMap<>();
    private static RedisLockProvider provider;
    private static long lockAtLeastMs;

    private ShedLockClient() {}

    private static ObjectNode acquire(JsonNode req, long start) throws InterruptedException {
        String name = req.get("lock").asText();
        long deadline = start + req.get("timeout_ms").asLong() * 1_000_000L;
        Duration atMost = Duration.ofMillis(req.get("lease_ms").asLong());
        Duration atLeast = Duration.ofMillis(Math.min(lockAtLeastMs, atMost.toMillis()));
        for (;;) {
            long attempt = System.nanoTime();
            Optional<SimpleLock> lock =
                provider.lock(new LockConfiguration(Instant.now(), name, atMost, atLeast));
            if (lock.isPresent()) {
                HELD.put(name, lock.get());
                return Stdio.reply("ok").putNull("token").put("attempt_ns", attempt - start);
            }
            if (System.nanoTime() + 100_000_000L > deadline) {
                return Stdio.failed("fail", "locked");
            }
            Thread.sleep(50);
        }
    }

    private static ObjectNode handle(JsonNode req, long start) throws InterruptedException {
        String op = req.get("op").asText();
        SimpleLock lock = HELD.get(req.path("lock").asText());
        switch (op) {
            case "acquire":
                return acquire(req, start);
            case "renew":
                return Stdio.failed("fail", lock == null ? "not-held" : "not-renewable");
            case "release":
                if (lock == null) {
                    return Stdio.failed("fail", "not-held");
                }
                HELD.remove(req.get("lock").asText());
                lock.unlock();
                return Stdio.reply("ok");
            case "close":
                System.exit(0);
                return null;
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        JsonNode opts = Stdio.options();
        Duration opTimeout = Duration.ofMillis(Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000));
        lockAtLeastMs = opts.path("lock_at_least_ms").asLong(0);
        String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
        int colon = ep.lastIndexOf(':');
        JedisConnectionFactory factory = new JedisConnectionFactory(
            new RedisStandaloneConfiguration(ep.substring(0, colon), Integer.parseInt(ep.substring(colon + 1))),
            JedisClientConfiguration.builder().connectTimeout(opTimeout).readTimeout(opTimeout).build());
        factory.afterPropertiesSet();
        provider = new RedisLockProvider(factory, "fencecheck");
        Stdio.serve(ShedLockClient::handle, Stdio.unknown("shedlock-client"));
    }
}
