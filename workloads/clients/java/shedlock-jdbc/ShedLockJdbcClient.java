// A fencecheck stdio client (docs/client-protocol.md) over ShedLock (net.javacrumbs.shedlock)
// with its JDBC provider, JdbcTemplateLockProvider, on PostgreSQL (the postgres-advisory
// backend's server) through the PostgreSQL JDBC driver. The protocol maps as for the Redis
// provider (workloads/clients/java/shedlock/):
//   acquire  LockProvider.lock(LockConfiguration(now, lock, lockAtMostFor = lease_ms,
//            lockAtLeastFor = the client option lock_at_least_ms, default 0)), tried again
//            every 50 ms until timeout_ms;
//   renew    refused ("not-renewable"), as the Redis client does: a job runs under its
//            lockAtMostFor alone;
//   release  SimpleLock.unlock(): lock_until set back to lockAtLeastFor after the grant, or now.
// Client options: use_db_time (default false, ShedLock's default) = the provider's
// usingDbTime(): lock_until and "now" come from PostgreSQL's clock, not this JVM's, and (in
// 5.10.0's PostgreSQL statements) the unlock then also checks locked_by; locked_by (default
// "fencecheck-w<worker>": each worker stands for a host of its own, and ShedLock's default, the
// host name, is one name for every worker on this machine).
// The program creates the provider's table ("shedlock", the schema ShedLock documents) if it is
// not there, before its first acquire. ShedLock has no fencing token: every grant replies null.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.jdbctemplate.JdbcTemplateLockProvider;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;

public final class ShedLockJdbcClient {
    private static final Map<String, SimpleLock> HELD = new HashMap<>();
    static final String TABLE = "shedlock";
    // ShedLock's documented PostgreSQL table.
    private static final String CREATE = "CREATE TABLE IF NOT EXISTS " + TABLE
        + " (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,"
        + " locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))";
    private static SingleConnectionDataSource dataSource;
    private static JdbcTemplateLockProvider provider;
    private static boolean tableReady;
    private static long lockAtLeastMs;

    private ShedLockJdbcClient() {}

    /** Creates the table once; false if it could not (nothing about a lock was sent). */
    private static boolean ensureTable() {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        // Workers start together, and two concurrent CREATE TABLE IF NOT EXISTS can collide on
        // PostgreSQL's catalog (a unique violation): the loser's retry finds the table there.
        for (int i = 0; i < 3 && !tableReady; i++) {
            try {
                jdbc.execute(CREATE);
                tableReady = true;
            } catch (DataAccessException e) {
                System.err.println("shedlock-jdbc-client: creating the table: " + e);
                dataSource.resetConnection();
            }
        }
        return tableReady;
    }

    private static ObjectNode acquire(JsonNode req, long start) throws InterruptedException {
        if (!ensureTable()) {
            return Stdio.failed("fail", "no-table");
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
        long timeoutS = Math.max(1, (long) Math.ceil(opts.path("op_timeout_s").asDouble(1.0)));
        lockAtLeastMs = opts.path("lock_at_least_ms").asLong(0);
        String worker = System.getenv().getOrDefault("FENCECHECK_WORKER", "0");
        String lockedBy = opts.path("locked_by").asText("fencecheck-w" + worker);
        String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
        String url = "jdbc:postgresql://" + ep + "/" + opts.path("database").asText("fencecheck")
            + "?connectTimeout=" + timeoutS + "&socketTimeout=" + timeoutS
            + "&loginTimeout=" + timeoutS + "&ApplicationName=shedlock-" + lockedBy;
        // One connection, kept open (a PostgreSQL backend per lock attempt would load the server);
        // reset after an error so that the next operation reconnects.
        dataSource = new SingleConnectionDataSource(url, opts.path("user").asText("postgres"), "", true);
        JdbcTemplateLockProvider.Configuration.Builder config = JdbcTemplateLockProvider.Configuration
            .builder().withJdbcTemplate(new JdbcTemplate(dataSource)).withTableName(TABLE)
            .withLockedByValue(lockedBy);
        if (opts.path("use_db_time").asBoolean(false)) {
            config = config.usingDbTime();
        }
        provider = new JdbcTemplateLockProvider(config.build());
        Stdio.OnError unknown = Stdio.unknown("shedlock-jdbc-client");
        Stdio.serve(ShedLockJdbcClient::handle, e -> { // database errors, timeouts
            ObjectNode r = unknown.reply(e);
            dataSource.resetConnection(); // the next operation reconnects
            return r;
        });
    }
}
