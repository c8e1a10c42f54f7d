// fencecheck stdio client (docs/client-protocol.md) over Apache Curator's InterProcessMutex
// (Debian's libcurator-recipes-java) on ZooKeeper. The token is the czxid of this process's lock
// node: ZooKeeper gives every created node a higher zxid, so later grants have higher tokens.
// The lock lives as long as the ZooKeeper session, whose timeout is the request's lease_ms (set
// when the client connects, from FENCECHECK_OPTIONS' lease_ms or the first acquire).
// Notices: Curator's connection states SUSPENDED (the connection is gone: the lock is in doubt)
// and LOST (Curator believes the session expired: the lock node is gone) are passed on as
// lost-lock notices about every lock held (docs/client-protocol.md), as Curator's documentation
// tells a lock's holder to watch them.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.data.Stat;

public final class CuratorClient {
    private static final Map<String, Mutex> HELD = new ConcurrentHashMap<>();
    private static final Map<String, Long> TOKENS = new ConcurrentHashMap<>(); // for the notices
    private static CuratorFramework zk;

    // InterProcessMutex keeps its own lock node's path protected: expose it for the czxid.
    private static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String lockPath() {
            return getLockPath();
        }
    }

    private static CuratorFramework connect(int sessionMs, int opMs) {
        String endpoints = System.getenv("FENCECHECK_ENDPOINTS");
        // No retries behind the history's back: one attempt per operation.
        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(endpoints)
            .sessionTimeoutMs(sessionMs).connectionTimeoutMs(Math.max(opMs, 1000))
            .retryPolicy(new RetryNTimes(0, 0)).build();
        c.getConnectionStateListenable().addListener((client, state) -> {
            if (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST) {
                TOKENS.forEach((lock, token) -> Stdio.notice(lock, token, state.name()));
            }
        });
        c.start();
        return c;
    }

    private static ObjectNode handle(JsonNode req, int opMs) throws Exception {
        ObjectNode reply = Stdio.JSON.createObjectNode();
        String op = req.path("op").asText();
        String lock = req.path("lock").asText();
        String path = "/fencecheck/" + lock;
        switch (op) {
            case "acquire": {
                if (zk == null) zk = connect(req.path("lease_ms").asInt(), opMs);
                Mutex m = new Mutex(zk, path);
                if (!m.acquire(req.path("timeout_ms").asLong(), TimeUnit.MILLISECONDS)) {
                    return reply.put("status", "fail").put("error", "timeout");
                }
                HELD.put(lock, m);
                Stat stat = zk.checkExists().forPath(m.lockPath());
                if (stat == null) return reply.put("status", "info").put("error", "lock node gone");
                TOKENS.put(lock, stat.getCzxid());
                return reply.put("status", "ok").put("token", stat.getCzxid());
            }
            case "renew": {
                // A ZooKeeper lock has no lease to extend: it is held while the session lives.
                boolean ok = HELD.containsKey(lock) && HELD.get(lock).isAcquiredInThisProcess()
                    && zk.getZookeeperClient().isConnected();
                return ok ? reply.put("status", "ok") : reply.put("status", "fail").put("error", "not-held");
            }
            case "release": {
                Mutex m = HELD.remove(lock);
                TOKENS.remove(lock);
                if (m == null) return reply.put("status", "fail").put("error", "not-held");
                m.release();
                return reply.put("status", "ok");
            }
            case "close":
                TOKENS.clear(); // closing says LOST: news of our own doing
                if (zk != null) zk.close();
                System.exit(0);
            default:
                return reply.put("status", "fail").put("error", "unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        int opMs = (int) (Stdio.options().path("op_timeout_s").asDouble(1.0) * 1000);
        Stdio.serve((req, start) -> handle(req, opMs), e -> Stdio.failed("info", String.valueOf(e)));
    }
}
