// A fencecheck stdio client (docs/client-protocol.md) over Redisson (org.redisson:redisson).
//   java RedissonLockClient lock     RLock: no token
//   java RedissonLockClient fenced   RFencedLock: token = its fencing token (INCR per grant)
// Both use Redisson's lock watchdog, the renewal its users rely on: a grant's lease is
// Config.lockWatchdogTimeout (the first acquire's lease_ms, since it is one setting per client),
// renewed by Redisson every third of it; renew here renews at once, the way the watchdog does.
// Everything runs on the main thread: Redisson locks belong to a thread. With the
// client option service_name (the redis-sentinel backend gives it) the endpoints are the
// sentinels and the locks live on the primary they name.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RScript;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;
import org.redisson.config.ReadMode;
import org.redisson.config.SentinelServersConfig;

public final class RedissonLockClient {
    private static final Map<String, RLock> HELD = new HashMap<>();
    private static final String RENEW = "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
        + "redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";
    private static RedissonClient redisson;
    private static boolean fenced;
    private static int opTimeoutMs;
    private static String sentinelMaster; // the client option service_name: Sentinel mode

    private RedissonLockClient() {}

    private static RedissonClient client(long leaseMs) {
        if (redisson == null) {
            Config cfg = new Config();
            cfg.setLockWatchdogTimeout(leaseMs);
            cfg.setThreads(2);
            cfg.setNettyThreads(4);
            String[] eps = System.getenv("FENCECHECK_ENDPOINTS").split(",");
            // A retried lock script of the same thread re-enters (hold count 2): never retry.
            if (sentinelMaster == null) {
                cfg.useSingleServer()
                    .setAddress("redis://" + eps[0])
                    .setTimeout(opTimeoutMs)
                    .setConnectTimeout(opTimeoutMs)
                    .setRetryAttempts(0)
                    .setConnectionMinimumIdleSize(1)
                    .setConnectionPoolSize(2)
                    .setSubscriptionConnectionMinimumIdleSize(1)
                    .setSubscriptionConnectionPoolSize(2);
            } else { // the endpoints are the sentinels; locks live on the primary they name
                SentinelServersConfig sc = cfg.useSentinelServers()
                    .setMasterName(sentinelMaster)
                    .setReadMode(ReadMode.MASTER)
                    .setTimeout(opTimeoutMs)
                    .setConnectTimeout(opTimeoutMs)
                    .setRetryAttempts(0)
                    .setMasterConnectionMinimumIdleSize(1)
                    .setMasterConnectionPoolSize(2)
                    .setSlaveConnectionMinimumIdleSize(1)
                    .setSlaveConnectionPoolSize(2)
                    .setSubscriptionConnectionMinimumIdleSize(1)
                    .setSubscriptionConnectionPoolSize(2);
                for (String ep : eps) {
                    sc.addSentinelAddress("redis://" + ep);
                }
            }
            redisson = Redisson.create(cfg);
        }
        return redisson;
    }

    private static ObjectNode acquire(JsonNode req) throws InterruptedException {
        String name = req.get("lock").asText();
        long wait = req.get("timeout_ms").asLong();
        RedissonClient c = client(req.get("lease_ms").asLong());
        if (fenced) {
            RFencedLock lock = c.getFencedLock("fencecheck:" + name);
            Long token = lock.tryLockAndGetToken(wait, TimeUnit.MILLISECONDS);
            if (token == null) {
                return Stdio.failed("fail", "timeout");
            }
            HELD.put(name, lock);
            return Stdio.reply("ok").put("token", token);
        }
        RLock lock = c.getLock("fencecheck:" + name);
        if (!lock.tryLock(wait, TimeUnit.MILLISECONDS)) {
            return Stdio.failed("fail", "timeout");
        }
        HELD.put(name, lock);
        return Stdio.reply("ok").putNull("token");
    }

    private static ObjectNode handle(JsonNode req) throws InterruptedException {
        String op = req.get("op").asText();
        RLock lock = HELD.get(req.path("lock").asText());
        switch (op) {
            case "acquire":
                return acquire(req);
            case "renew":
                // The watchdog last renewed up to a third of a lease ago, but the worker counts a
                // renewed lease from this request: renew now, as the watchdog does (pexpire only
                // while this thread's entry is in the lock's hash), in one script.
                if (lock == null) {
                    return Stdio.failed("fail", "not-held");
                }
                Long renewed = redisson.getScript(StringCodec.INSTANCE).eval(
                    RScript.Mode.READ_WRITE, RENEW, RScript.ReturnType.INTEGER,
                    List.of(lock.getName()), req.get("lease_ms").asText(),
                    redisson.getId() + ":" + Thread.currentThread().getId());
                return renewed != null && renewed == 1
                    ? Stdio.reply("ok") : Stdio.failed("fail", "not-held");
            case "release":
                if (lock == null) {
                    return Stdio.failed("fail", "not-held");
                }
                HELD.remove(req.get("lock").asText());
                try {
                    lock.unlock();
                } catch (IllegalMonitorStateException e) { // it expired, or another holds it
                    return Stdio.failed("fail", "not-held");
                }
                return Stdio.reply("ok");
            case "close":
                if (redisson != null) {
                    redisson.shutdown(0, 1, TimeUnit.SECONDS);
                }
                System.exit(0);
                return null;
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        fenced = args.length > 0 && args[0].equals("fenced");
        JsonNode opts = Stdio.options();
        opTimeoutMs = (int) Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000);
        sentinelMaster = opts.hasNonNull("service_name") ? opts.get("service_name").asText() : null;
        Stdio.serve((req, start) -> handle(req), Stdio.unknown("redisson-client"));
    }
}
