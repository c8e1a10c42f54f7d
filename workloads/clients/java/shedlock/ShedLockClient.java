// A fencecheck stdio client (docs/client-protocol.md) over ShedLock (net.javacrumbs.shedlock),
// the "run this scheduled job once" library, with its Redis provider (RedisLockProvider over
// Spring Data Redis and Jedis): the key lives on after a release until lockAtLeastFor has
// passed, else it is deleted. ShedLock's semantics on the protocol, shared with the JDBC client,
// are in ../shedlock-common/ShedLockJobs.java; every grant replies token null.
import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import net.javacrumbs.shedlock.provider.redis.spring.RedisLockProvider;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.jedis.JedisClientConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;

public final class ShedLockClient {
    private ShedLockClient() {}

    public static void main(String[] args) throws Exception {
        JsonNode opts = Stdio.options();
        Duration opTimeout = Duration.ofMillis(Math.round(opts.path("op_timeout_s").asDouble(1.0) * 1000));
        String ep = System.getenv("FENCECHECK_ENDPOINTS").split(",")[0];
        int colon = ep.lastIndexOf(':');
        JedisConnectionFactory factory = new JedisConnectionFactory(
            new RedisStandaloneConfiguration(ep.substring(0, colon), Integer.parseInt(ep.substring(colon + 1))),
            JedisClientConfiguration.builder().connectTimeout(opTimeout).readTimeout(opTimeout).build());
        factory.afterPropertiesSet();
        ShedLockJobs jobs = new ShedLockJobs(new RedisLockProvider(factory, "fencecheck"),
            opts.path("lock_at_least_ms").asLong(0), () -> null);
        Stdio.serve(jobs::handle, Stdio.unknown("shedlock-client"));
    }
}
