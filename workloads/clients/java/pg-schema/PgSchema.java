// What the JDBC clients of the postgres-advisory backend share (quartz/, spring-integration/):
// the connection URL they build from the run's endpoint and options, and the library's own
// table script (shipped in its jar) run once per database. Workers start together: the script
// runs under a PostgreSQL advisory lock, and only where its first table is missing, so no two
// programs create the tables at once (Quartz's script begins with DROP TABLE IF EXISTS).
// The builds copy this folder into each client's build folder (workloads/clients/build.py).
import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

final class PgSchema {
    // pg_advisory_lock(int, int): a class id of our own, beside the pg-advisory clients' keys
    private static final String LOCK = "SELECT pg_advisory_lock(1717986918, 1)";

    private PgSchema() {}

    /** jdbc:postgresql URL of the run's PostgreSQL: FENCECHECK_ENDPOINTS, option `database`
     * (default fencecheck); connect and socket timeouts of `socket_timeout_s` (default 10 s:
     * three JVMs starting at once on a loaded machine took longer than a second to connect; an
     * operation's own deadline is the worker's, which restarts a program that overruns it). */
    static String url(JsonNode opts, String application) {
        String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
        long socketS = Math.max(1, opts.path("socket_timeout_s").asLong(10));
        return "jdbc:postgresql://" + ep + "/" + opts.path("database").asText("fencecheck")
            + "?connectTimeout=" + socketS + "&loginTimeout=" + socketS
            + "&socketTimeout=" + socketS + "&ApplicationName=" + application;
    }

    static String user(JsonNode opts) {
        return opts.path("user").asText("postgres");
    }

    /** Runs the script `resource` (of the library's jar) unless the table `probe` exists. */
    static void ensure(String url, String user, String probe, String resource)
            throws SQLException, IOException {
        try (Connection c = DriverManager.getConnection(url, user, "");
             Statement st = c.createStatement()) {
            st.execute(LOCK); // a session lock: given up when the connection closes
            try (ResultSet rs = st.executeQuery("SELECT to_regclass('" + probe + "') IS NOT NULL")) {
                rs.next();
                if (rs.getBoolean(1)) {
                    return;
                }
            }
            for (String sql : statements(resource)) {
                st.execute(sql);
            }
            System.err.println("pg-schema: created the tables of " + resource);
        }
    }

    private static String[] statements(String resource) throws IOException {
        try (InputStream in = PgSchema.class.getClassLoader().getResourceAsStream(resource)) {
            if (in == null) {
                throw new IOException("no " + resource + " on the classpath");
            }
            // Block comments out first (Spring Integration's script comments out a trigger
            // function whose body has semicolons), then line comments; the scripts have no
            // other statement with a semicolon inside it.
            String text = new String(in.readAllBytes(), StandardCharsets.UTF_8)
                .replaceAll("(?s)/\\*.*?\\*/", "");
            StringBuilder sql = new StringBuilder();
            for (String line : text.split("\n")) {
                String t = line.strip();
                if (!t.startsWith("--") && !t.startsWith("#")) {
                    sql.append(line).append('\n');
                }
            }
            return java.util.Arrays.stream(sql.toString().split(";"))
                .map(String::strip)
                .filter(s -> !s.isEmpty() && !s.equalsIgnoreCase("commit"))
                .toArray(String[]::new);
        }
    }
}
