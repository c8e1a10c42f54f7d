// A fencecheck stdio client (docs/client-protocol.md) over ShedLock (net.javacrumbs.shedlock)
// with its JDBC provider, JdbcTemplateLockProvider, on PostgreSQL (the postgres-advisory
// backend's server) through the PostgreSQL JDBC driver. The protocol maps as for the Redis
// provider (../shedlock-common/ShedLockJobs.java, shared with it); a release sets lock_until
// back to lockAtLeastFor after the grant, or now.
// Client options: use_db_time (default false, ShedLock's default) = the provider's
// usingDbTime(): lock_until and "now" come from PostgreSQL's clock, not this JVM's, and (in
// 5.10.0's PostgreSQL statements) the unlock then also checks locked_by; locked_by (default
// "fencecheck-w<worker>": each worker stands for a host of its own, and ShedLock's default, the
// host name, is one name for every worker on this machine).
// The program creates the provider's table ("shedlock", the schema ShedLock documents) if it is
// not there, before its first acquire. ShedLock has no fencing token: every grant replies null.
// Evidence (docs/client-protocol.md): each reply carries the statements ShedLock ran for it
// ("statements": its SQL as sent, the rows it changed, when), so a release shows its unlock's
// WHERE clause and how many rows it matched.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import javax.sql.DataSource;
import net.javacrumbs.shedlock.provider.jdbctemplate.JdbcTemplateLockProvider;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.core.PreparedStatementCreator;
import org.springframework.jdbc.core.SqlProvider;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;

public final class ShedLockJdbcClient {
    static final String TABLE = "shedlock";
    // ShedLock's documented PostgreSQL table.
    private static final String CREATE = "CREATE TABLE IF NOT EXISTS " + TABLE
        + " (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,"
        + " locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))";
    private static SingleConnectionDataSource dataSource;
    private static boolean tableReady;

    private ShedLockJdbcClient() {}

    /** The JdbcTemplate ShedLock runs its statements through, keeping each with its count. */
    static final class Recording extends JdbcTemplate {
        final ArrayNode log = Stdio.JSON.createArrayNode();
        long start; // when the request being answered was read (System.nanoTime())

        Recording(DataSource ds) {
            super(ds);
        }

        @Override
        public int update(PreparedStatementCreator psc) {
            long at = System.nanoTime();
            int rows = super.update(psc);
            String sql = psc instanceof SqlProvider p ? p.getSql() : null;
            log.addObject().put("sql", sql).put("rows", rows).put("at_ns", at - start);
            return rows;
        }

        /** The reply with the statements run since the last one, as its evidence. */
        ObjectNode attach(ObjectNode reply) {
            if (!log.isEmpty()) {
                reply.putObject("evidence").set("statements", log.deepCopy());
                log.removeAll();
            }
            return reply;
        }
    }

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

    public static void main(String[] args) throws Exception {
        JsonNode opts = Stdio.options();
        long timeoutS = Math.max(1, (long) Math.ceil(opts.path("op_timeout_s").asDouble(1.0)));
        String worker = System.getenv().getOrDefault("FENCECHECK_WORKER", "0");
        String lockedBy = opts.path("locked_by").asText("fencecheck-w" + worker);
        String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
        String url = "jdbc:postgresql://" + ep + "/" + opts.path("database").asText("fencecheck")
            + "?connectTimeout=" + timeoutS + "&socketTimeout=" + timeoutS
            + "&loginTimeout=" + timeoutS + "&ApplicationName=shedlock-" + lockedBy;
        // One connection, kept open (a PostgreSQL backend per lock attempt would load the server);
        // reset after an error so that the next operation reconnects.
        dataSource = new SingleConnectionDataSource(url, opts.path("user").asText("postgres"), "", true);
        Recording jdbc = new Recording(dataSource);
        JdbcTemplateLockProvider.Configuration.Builder config = JdbcTemplateLockProvider.Configuration
            .builder().withJdbcTemplate(jdbc).withTableName(TABLE)
            .withLockedByValue(lockedBy);
        if (opts.path("use_db_time").asBoolean(false)) {
            config = config.usingDbTime();
        }
        ShedLockJobs jobs = new ShedLockJobs(new JdbcTemplateLockProvider(config.build()),
            opts.path("lock_at_least_ms").asLong(0),
            () -> ensureTable() ? null : Stdio.failed("fail", "no-table"));
        Stdio.OnError unknown = Stdio.unknown("shedlock-jdbc-client");
        Stdio.serve((req, start) -> {
            jdbc.start = start;
            return jdbc.attach(jobs.handle(req, start));
        }, e -> { // database errors, timeouts
            ObjectNode r = unknown.reply(e);
            dataSource.resetConnection(); // the next operation reconnects
            return r;
        });
    }
}
