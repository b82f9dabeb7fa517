// Readiness probe for the local test broker, used by scripts/services.sh.
// Compiled once with javac against the broker's own jars (kafka-clients).
//
//   java -cp '<lib>/*:<classes>' KafkaProbe <bootstrap> <timeout-seconds> [warm]
//
// Succeeds (exit 0) once a metadata request (describeCluster) answers and a
// throwaway topic can be created (and is deleted again). With "warm" it also
// makes the broker create __consumer_offsets and __transaction_state, so the
// first consumer group / transaction in a test does not wait for them.
// Exit 1 when not ready before the deadline.

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.TopicExistsException;

public class KafkaProbe {
    static final String PROBE = "__auditrec_services_probe";

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        long timeoutMs = (args.length > 1 ? Long.parseLong(args[1]) : 60) * 1000L;
        boolean warm = args.length > 2 && args[2].equals("warm");
        long deadline = System.currentTimeMillis() + timeoutMs;
        String lastError = "no attempt";

        while (System.currentTimeMillis() < deadline) {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
            p.put(AdminClientConfig.CLIENT_ID_CONFIG, "auditrec-services-probe");
            try (Admin admin = Admin.create(p)) {
                String clusterId = admin.describeCluster().clusterId().get(10, TimeUnit.SECONDS);
                int nodes = admin.describeCluster().nodes().get(10, TimeUnit.SECONDS).size();
                try {
                    admin.createTopics(List.of(new NewTopic(PROBE, 1, (short) 1)))
                         .all().get(15, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) throw e;
                }
                try {
                    admin.deleteTopics(List.of(PROBE)).all().get(15, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    // best effort: a pending deletion is fine
                }
                if (warm) {
                    try {
                        admin.listConsumerGroupOffsets(PROBE).partitionsToOffsetAndMetadata()
                             .get(60, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        System.err.println("kafka probe: group coordinator warm-up: " + e);
                    }
                    try {
                        admin.describeTransactions(List.of(PROBE)).all().get(60, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        // TransactionalIdNotFound is the expected answer once the
                        // transaction coordinator is up
                        Throwable c = e.getCause();
                        if (c == null || !c.getClass().getSimpleName().equals("TransactionalIdNotFoundException")) {
                            System.err.println("kafka probe: transaction coordinator warm-up: " + e);
                        }
                    }
                }
                System.out.println("kafka ready at " + bootstrap + " (cluster id " + clusterId
                        + ", " + nodes + " node(s))");
                return;
            } catch (Exception e) {
                lastError = e.toString();
            }
            Thread.sleep(1000);
        }
        System.err.println("kafka probe: not ready at " + bootstrap + ": " + lastError);
        System.exit(1);
    }
}
