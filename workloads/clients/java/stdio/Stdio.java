// The request loop every shipped Java client shares (docs/client-protocol.md): one JSON request
// a line on stdin, one reply a line on stdout with the request's id, in order; FENCECHECK_OPTIONS
// as a JSON tree. A client's handler maps an op onto its library; what the handler throws is
// the reply the client's onError makes of it (an unknown outcome: info).
//
// The builds (workloads/clients/build.py) copy this folder into each client's build folder as
// stdio/ and compile it with the client by javac (in the source tree: stdio/Stdio.java beside
// CuratorClient.java, ../stdio/Stdio.java from a Maven project's folder).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

public final class Stdio {
    public static final ObjectMapper JSON = new ObjectMapper();

    /** Answers one request; start is System.nanoTime() when its line was read. */
    public interface Handler {
        ObjectNode handle(JsonNode req, long start) throws Exception;
    }

    /** The reply to a request whose handler threw. */
    public interface OnError {
        ObjectNode reply(Exception e);
    }

    private Stdio() {}

    /** FENCECHECK_OPTIONS, every client option, as one JSON object ({} when unset). */
    public static JsonNode options() throws IOException {
        String env = System.getenv("FENCECHECK_OPTIONS");
        return JSON.readTree(env == null ? "{}" : env);
    }

    public static ObjectNode reply(String status) {
        ObjectNode r = JSON.createObjectNode();
        r.put("status", status);
        return r;
    }

    public static ObjectNode failed(String status, String error) {
        ObjectNode r = reply(status);
        r.put("error", error);
        return r;
    }

    /** An error of the library (I/O, a timeout): logged as "name: e", the outcome unknown. */
    public static OnError unknown(String name) {
        return e -> {
            System.err.println(name + ": " + e);
            return failed("info", e.getClass().getSimpleName());
        };
    }

    /** One line on stdout, whole: the replies and the notices of any thread share it. */
    private static synchronized void println(ObjectNode line) throws IOException {
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }

    /**
     * Tells the worker, now, that the library said the lock it holds (the grant of token, null
     * where it has none) is lost or in doubt; reason is the library's words. Safe from any
     * thread, at any time, also while a request is in flight (docs/client-protocol.md).
     */
    public static void notice(String lock, Long token, String reason) {
        ObjectNode n = JSON.createObjectNode().put("op", "notice").put("lock", lock);
        if (token == null) {
            n.putNull("token");
        } else {
            n.put("token", token);
        }
        n.put("reason", reason);
        try {
            println(n);
        } catch (IOException e) {
            System.err.println("notice: " + e);
        }
    }

    /** Answers requests until stdin closes, then exits 0 (close is the handler's to answer). */
    public static void serve(Handler handler, OnError onError) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            long start = System.nanoTime();
            JsonNode req = JSON.readTree(line);
            ObjectNode r;
            try {
                r = handler.handle(req, start);
            } catch (Exception e) {
                r = onError.reply(e);
            }
            ObjectNode out = JSON.createObjectNode().put("id", req.path("id").asLong());
            out.setAll(r);
            println(out);
        }
        System.exit(0);
    }
}
