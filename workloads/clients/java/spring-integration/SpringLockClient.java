// A fencecheck stdio client (docs/client-protocol.md) over Spring Integration's distributed locks:
// JdbcLockRegistry (DefaultLockRepository, the INT_LOCK table, on the postgres-advisory
// backend's PostgreSQL) and RedisLockRegistry (the redis backend), as lock clients, and
// LockRegistryLeaderInitiator over either, for the `leader` workload. The first argument is the
// mode: jdbc, redis, jdbc-leader or redis-leader. No fencing token: every grant replies null.
//   lock modes   acquire  DistributedLock.tryLock(wait 0, ttl = lease_ms), one attempt, tried
//                         again every `idle_ms` (default 100, the registries' idleBetweenTries)
//                         until timeout_ms, as the library's own wait loop does (which times its
//                         wait by the wall clock): the reply's attempt_ns is the winning attempt's;
//                renew    RenewableLockRegistry.renewLock(lock, ttl = lease_ms);
//                release  unlock(). Where the library finds the lock lost (its TTL ran out and
//                         the store holds another client's, or none), unlock() throws: fail
//                         "lock-lost", the exception in the reply's evidence {"unlock_error"}.
//   leader modes acquire  starts the initiator and waits until its candidate is granted;
//                         not granted by timeout_ms: the initiator is stopped, fail
//                         "not-elected";
//                renew    ok once the initiator's heartbeat has taken the lock again after the
//                         request was read (so the renewed lease starts after the renew's
//                         invoke); revoked meanwhile: fail "not-leader";
//                release  stops the initiator (it revokes and unlocks).
// The registries' TTL is the first acquire's lease_ms (the initiator locks without a TTL of its
// own); the program connects, and loads the library by building a registry, before it reads its
// first request. Client options: idle_ms; auto_renew (default false): the registry's renewal task
// (setRenewalTaskScheduler) renews held locks, as Redisson's watchdog does; heartbeat_ms
// (default 500) and busy_wait_ms (default 50), the initiator's; region (default "DEFAULT", the
// JDBC repository's). The JDBC mode creates INT_LOCK from the script in Spring Integration's jar
// (schema-postgresql.sql) if it is not there (../pg-schema/PgSchema.java).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.jedis.JedisClientConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;
import org.springframework.integration.jdbc.lock.DefaultLockRepository;
import org.springframework.integration.jdbc.lock.JdbcLockRegistry;
import org.springframework.integration.redis.util.RedisLockRegistry;
import org.springframework.integration.support.locks.DistributedLock;
import org.springframework.integration.support.locks.RenewableLockRegistry;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.scheduling.concurrent.ThreadPoolTaskScheduler;

public final class SpringLockClient {
    private final JsonNode opts;
    private final String mode;
    private final Map<String, DistributedLock> held = new HashMap<>();
    private RenewableLockRegistry<DistributedLock> registry;
    private HikariDataSource dataSource; // jdbc modes
    private JedisConnectionFactory redis; // redis modes
    private SpringLeader leader;

    private SpringLockClient(JsonNode opts, String mode) {
        this.opts = opts;
        this.mode = mode;
    }

    private static Duration millis(JsonNode opts, String key, long dflt) {
        return Duration.ofMillis(opts.path(key).asLong(dflt));
    }

    /** The registry, built at the first acquire: its TTL is that lease. */
    private RenewableLockRegistry<DistributedLock> registry(long leaseMs) {
        if (registry == null) {
            registry = build(Duration.ofMillis(leaseMs));
            if (opts.path("auto_renew").asBoolean(false)) {
                ThreadPoolTaskScheduler scheduler = new ThreadPoolTaskScheduler();
                scheduler.setDaemon(true);
                scheduler.initialize();
                registry.setRenewalTaskScheduler(scheduler);
            }
        }
        return registry;
    }

    private RenewableLockRegistry<DistributedLock> build(Duration ttl) {
        if (dataSource != null) {
            DefaultLockRepository repo = new DefaultLockRepository(dataSource);
            repo.setRegion(opts.path("region").asText("DEFAULT"));
            repo.setTransactionManager(new DataSourceTransactionManager(dataSource));
            repo.afterPropertiesSet();
            repo.afterSingletonsInstantiated();
            repo.start();
            JdbcLockRegistry r = new JdbcLockRegistry(repo, ttl);
            r.setIdleBetweenTries(millis(opts, "idle_ms", 100));
            return r;
        }
        RedisLockRegistry r = new RedisLockRegistry(redis, "fencecheck", ttl);
        r.setIdleBetweenTries(millis(opts, "idle_ms", 100));
        return r;
    }

    /** Connects to the store, and builds and drops a registry: the JVM's start-up (loading
     * Spring's classes takes seconds on a loaded machine) happens before the first request, not
     * inside its timeout. The JDBC mode creates INT_LOCK here. */
    private void connect() throws Exception {
        Duration timeout = Duration.ofMillis(Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000));
        if (mode.startsWith("jdbc")) {
            String worker = System.getenv().getOrDefault("FENCECHECK_WORKER", "0");
            String url = PgSchema.url(opts, "spring-jdbc-w" + worker);
            PgSchema.ensure(url, PgSchema.user(opts), "int_lock",
                "org/springframework/integration/jdbc/schema-postgresql.sql");
            HikariConfig pool = new HikariConfig();
            pool.setJdbcUrl(url);
            pool.setUsername(PgSchema.user(opts));
            pool.setMaximumPoolSize(4);
            pool.setConnectionTimeout(Math.max(250, timeout.toMillis()));
            dataSource = new HikariDataSource(pool);
        } else {
            String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
            int colon = ep.lastIndexOf(':');
            redis = new JedisConnectionFactory(
                new RedisStandaloneConfiguration(ep.substring(0, colon), Integer.parseInt(ep.substring(colon + 1))),
                JedisClientConfiguration.builder().connectTimeout(timeout).readTimeout(timeout).build());
            redis.afterPropertiesSet();
            redis.start();
        }
        build(Duration.ofSeconds(1)).obtain("fencecheck-warm-up");
    }

    /** What the library said, as a reply's evidence value: "Class: message". */
    static String said(Throwable e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    private ObjectNode acquire(JsonNode req, long start) throws InterruptedException {
        String name = req.get("lock").asText();
        long leaseMs = req.get("lease_ms").asLong();
        long deadline = start + req.get("timeout_ms").asLong() * 1_000_000L;
        DistributedLock lock = registry(leaseMs).obtain(name);
        long idleMs = opts.path("idle_ms").asLong(100);
        for (;;) {
            long attempt = System.nanoTime();
            if (lock.tryLock(Duration.ZERO, Duration.ofMillis(leaseMs))) {
                held.put(name, lock);
                return Stdio.reply("ok").putNull("token").put("attempt_ns", attempt - start);
            }
            if (System.nanoTime() + (idleMs + 100) * 1_000_000L > deadline) {
                return Stdio.failed("fail", "locked");
            }
            Thread.sleep(idleMs);
        }
    }

    private ObjectNode release(String name) {
        DistributedLock lock = held.remove(name);
        if (lock == null) {
            return Stdio.failed("fail", "not-held");
        }
        try {
            lock.unlock();
            return Stdio.reply("ok");
        } catch (java.util.ConcurrentModificationException e) {
            // The library's word that the lock was no longer this client's (its TTL ran out):
            // its unlock removed nothing of another's.
            ObjectNode r = Stdio.failed("fail", "lock-lost");
            r.putObject("evidence").put("unlock_error", said(e));
            return r;
        } catch (RuntimeException e) {
            System.err.println("spring-lock-client: unlock: " + e);
            ObjectNode r = Stdio.failed("info", e.getClass().getSimpleName());
            r.putObject("evidence").put("unlock_error", said(e));
            return r;
        }
    }

    private ObjectNode renew(JsonNode req) {
        String name = req.get("lock").asText();
        if (!held.containsKey(name)) {
            return Stdio.failed("fail", "not-held");
        }
        try {
            registry.renewLock(name, Duration.ofMillis(req.get("lease_ms").asLong()));
            return Stdio.reply("ok");
        } catch (IllegalStateException e) {
            // "Could not renew mutex" / "the lock was released in the store": not ours any more
            ObjectNode r = Stdio.failed("fail", "lock-lost");
            r.putObject("evidence").put("renew_error", said(e));
            return r;
        }
    }

    private ObjectNode handle(JsonNode req, long start) throws Exception {
        String op = req.get("op").asText();
        if ("close".equals(op)) {
            System.exit(0);
        }
        if (mode.endsWith("-leader")) {
            if (leader == null && "acquire".equals(op)) {
                leader = new SpringLeader(registry(req.get("lease_ms").asLong()), opts);
            }
            return leader == null ? Stdio.failed("fail", "not-leader") : leader.handle(op, req, start);
        }
        switch (op) {
            case "acquire":
                return acquire(req, start);
            case "renew":
                return renew(req);
            case "release":
                return release(req.get("lock").asText());
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        String mode = args.length > 0 ? args[0] : "";
        if (!java.util.List.of("jdbc", "redis", "jdbc-leader", "redis-leader").contains(mode)) {
            System.err.println("usage: SpringLockClient jdbc|redis|jdbc-leader|redis-leader");
            System.exit(3);
        }
        SpringLockClient client = new SpringLockClient(Stdio.options(), mode);
        client.connect();
        Stdio.serve(client::handle, Stdio.unknown("spring-lock-client"));
    }
}
