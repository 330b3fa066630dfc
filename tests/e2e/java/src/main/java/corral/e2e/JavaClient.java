package corral.e2e;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client (kafka-clients 4.4) driven by tests/e2e/test_java_client.py (and, over TLS and
 * SASL, tests/e2e/test_security_clients.py), one JVM per test step. Every subcommand prints its
 * outcome as JSON on stdout (one object, or one object per line for {@code member}); the test
 * asserts on it. Client warnings go to stderr.
 *
 * <ul>
 *   <li>{@code roundtrip --bootstrap B --topic T --partitions P --count N --group G --protocol classic|consumer}:
 *       creates T, produces N records (acks=all, idempotence on), consumes them in group G with
 *       the given group.protocol, commits, closes, and reads the committed offsets back with
 *       Admin.listConsumerGroupOffsets together with the end offsets. With
 *       {@code --client-config FILE} (a java.util.Properties file: security.protocol, ssl.*,
 *       sasl.*, ...) its entries are added to the Admin, producer and consumer configs. If the
 *       roundtrip fails with an exception it prints {@code {"error": CLASS, "message": MESSAGE,
 *       "causes": [...]}} instead (CLASS and MESSAGE those of the first exception that is not
 *       a mere wrapper such as ExecutionException, the simple class name; causes the chain
 *       below it, each {"error", "message"}) and exits 1.
 *   <li>{@code member --bootstrap B --topic T --group G --client-id C [--instance-id I] [--max-records M]}:
 *       a classic-protocol member (static with an instance id) that consumes and commits up to M
 *       records, then pauses its partitions and stays in the group until stdin closes. Prints
 *       events: assigned, revoked, lost, committed, error, closed.
 *   <li>{@code groups --bootstrap B --group G [--remove-instance I]}: Admin.describeConsumerGroups,
 *       listConsumerGroups and listGroups (consumer groups); with --remove-instance, removeMembersFromConsumerGroup of that
 *       static member, then describe again.
 * </ul>
 */
public final class JavaClient {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        Map<String, String> opts = options(args);
        Object out;
        switch (args[0]) {
            case "roundtrip":
                try {
                    out = roundtrip(opts);
                } catch (Exception e) {
                    System.out.println(Json.write(failure(e)));
                    System.out.flush();
                    System.exit(1);
                    return;
                }
                break;
            case "member":
                member(opts);
                return;
            case "groups":
                out = groups(opts);
                break;
            default:
                usage();
                return;
        }
        System.out.println(Json.write(out));
        System.out.flush();
    }

    private static void usage() {
        System.err.println("usage: JavaClient roundtrip|member|groups --bootstrap HOST:PORT[,...] ...");
        System.exit(2);
    }

    private static Map<String, String> options(String[] args) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                System.err.println("bad option: " + args[i]);
                System.exit(2);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        return opts;
    }

    private static String need(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) {
            System.err.println("missing --" + key);
            System.exit(2);
        }
        return v;
    }

    private static Admin admin(String bootstrap) {
        return admin(bootstrap, new Properties());
    }

    private static Admin admin(String bootstrap, Properties extra) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "e2e-java-admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        p.putAll(extra);
        return Admin.create(p);
    }

    /** The entries of --client-config FILE (none without it). */
    private static Properties clientConfig(Map<String, String> opts) throws Exception {
        Properties p = new Properties();
        String file = opts.get("client-config");
        if (file != null) {
            try (Reader r = Files.newBufferedReader(Path.of(file), StandardCharsets.UTF_8)) {
                p.load(r);
            }
        }
        return p;
    }

    /** What failed: the first exception below the wrappers (ExecutionException and the like),
     * and the chain of its causes. */
    private static Map<String, Object> failure(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("error", t.getClass().getSimpleName());
        out.put("message", t.getMessage());
        List<Object> causes = new ArrayList<>();
        for (Throwable c = t.getCause(); c != null && causes.size() < 16; c = c.getCause()) {
            Map<String, Object> co = new LinkedHashMap<>();
            co.put("error", c.getClass().getSimpleName());
            co.put("message", c.getMessage());
            causes.add(co);
        }
        out.put("causes", causes);
        return out;
    }

    // --- roundtrip ------------------------------------------------------------------------------

    private static Map<String, Object> roundtrip(Map<String, String> opts) throws Exception {
        String bootstrap = need(opts, "bootstrap");
        String topic = need(opts, "topic");
        String group = need(opts, "group");
        String protocol = need(opts, "protocol");
        int partitions = Integer.parseInt(need(opts, "partitions"));
        int count = Integer.parseInt(need(opts, "count"));
        Properties extra = clientConfig(opts);
        Map<String, Object> out = new LinkedHashMap<>();

        try (Admin admin = admin(bootstrap, extra)) {
            admin.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty()))).all().get(60, TimeUnit.SECONDS);
        }

        // Produce: acks=all, idempotent.
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "e2e-java-producer");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.putAll(extra);
        Map<Integer, List<Long>> acked = new TreeMap<>();
        List<String> produceErrors = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, "k-" + i, "v-" + i)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                try {
                    RecordMetadata md = f.get(60, TimeUnit.SECONDS);
                    acked.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add(md.offset());
                } catch (Exception e) {
                    produceErrors.add(String.valueOf(e.getCause() != null ? e.getCause() : e));
                }
            }
        }
        Map<String, Object> produced = new LinkedHashMap<>();
        produced.put("acked", acked.values().stream().mapToInt(List::size).sum());
        // Per partition: how many were acknowledged, and whether their offsets are exactly 0..n-1
        // (no gap, no duplicate write).
        Map<String, Object> ackedOffsets = new TreeMap<>();
        acked.forEach((p, offs) -> {
            List<Long> sorted = new ArrayList<>(offs);
            sorted.sort(null);
            boolean dense = true;
            for (int i = 0; i < sorted.size(); i++) {
                dense &= sorted.get(i) == i;
            }
            ackedOffsets.put(String.valueOf(p), Map.of("count", offs.size(), "dense_from_0", dense));
        });
        produced.put("partitions", ackedOffsets);
        produced.put("errors", produceErrors);
        out.put("produced", produced);

        // Consume in a group, commit, close.
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "e2e-java-consumer");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        if (protocol.equals("classic")) {
            // KIP-848 members may not set these (the coordinator decides).
            cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        cp.putAll(extra);
        Map<String, Integer> seen = new HashMap<>();
        Map<Integer, Long> lastOffset = new TreeMap<>();
        int records = 0;
        List<String> assignment = new ArrayList<>();
        Map<String, Object> committedByConsumer = new TreeMap<>();
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < count && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : batch) {
                    records++;
                    seen.merge(r.value(), 1, Integer::sum);
                    lastOffset.merge(r.partition(), r.offset(), Math::max);
                }
            }
            consumer.commitSync(TIMEOUT);
            for (TopicPartition tp : consumer.assignment()) {
                assignment.add(tp.toString());
            }
            consumer.committed(consumer.assignment(), TIMEOUT)
                .forEach((tp, om) -> committedByConsumer.put(String.valueOf(tp.partition()), om == null ? null : om.offset()));
        }
        assignment.sort(null);
        int duplicates = seen.values().stream().mapToInt(n -> n - 1).sum();
        Map<String, Object> consumed = new LinkedHashMap<>();
        consumed.put("records", records);
        consumed.put("distinct", seen.size());
        consumed.put("duplicates", duplicates);
        int missing = 0;
        for (int i = 0; i < count; i++) {
            if (!seen.containsKey("v-" + i)) {
                missing++;
            }
        }
        consumed.put("missing", missing);
        consumed.put("assignment", assignment);
        Map<String, Object> last = new TreeMap<>();
        lastOffset.forEach((p, o) -> last.put(String.valueOf(p), o));
        consumed.put("last_offsets", last);
        consumed.put("committed_by_consumer", committedByConsumer);
        out.put("consumed", consumed);

        // What an operator's tools read back.
        try (Admin admin = admin(bootstrap, extra)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS);
            Map<String, Object> committedOut = new TreeMap<>();
            committed.forEach((tp, om) -> committedOut.put(tp.topic() + "-" + tp.partition(), om == null ? null : om.offset()));
            out.put("committed", committedOut);
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p = 0; p < partitions; p++) {
                latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
            }
            Map<String, Object> ends = new TreeMap<>();
            admin.listOffsets(latest).all().get(60, TimeUnit.SECONDS)
                .forEach((tp, info) -> ends.put(tp.topic() + "-" + tp.partition(), info.offset()));
            out.put("end_offsets", ends);
            out.put("group_after", describe(admin, group));
        }
        return out;
    }

    // --- member ---------------------------------------------------------------------------------

    private static void event(String name, Map<String, Object> fields) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("event", name);
        e.putAll(fields);
        synchronized (System.out) {
            System.out.println(Json.write(e));
            System.out.flush();
        }
    }

    private static List<String> names(Collection<TopicPartition> parts) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : parts) {
            out.add(tp.toString());
        }
        out.sort(null);
        return out;
    }

    private static void member(Map<String, String> opts) throws Exception {
        String topic = need(opts, "topic");
        int maxRecords = Integer.parseInt(opts.getOrDefault("max-records", "-1"));
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, need(opts, "bootstrap"));
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, need(opts, "client-id"));
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, need(opts, "group"));
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        if (opts.containsKey("instance-id")) {
            cp.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, opts.get("instance-id"));
        }
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        cp.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                while (r.readLine() != null) {
                    // any line is ignored; end of input stops the member
                }
            } catch (Exception ignored) {
                // treated as end of input
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        int consumed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    event("revoked", Map.of("partitions", names(parts)));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    event("assigned", Map.of("partitions", names(parts)));
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    event("lost", Map.of("partitions", names(parts)));
                }
            });
            while (!stop.get()) {
                if (maxRecords >= 0 && consumed >= maxRecords) {
                    consumer.pause(consumer.assignment());
                }
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                Map<TopicPartition, Long> notConsumed = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (notConsumed.containsKey(tp) || (maxRecords >= 0 && consumed >= maxRecords)) {
                        // Beyond the limit: left for later, the position goes back to it.
                        notConsumed.putIfAbsent(tp, r.offset());
                        continue;
                    }
                    consumed++;
                    commit.put(tp, new OffsetAndMetadata(r.offset() + 1));
                }
                notConsumed.forEach(consumer::seek);
                if (!commit.isEmpty()) {
                    consumer.commitSync(commit, TIMEOUT);
                    Map<String, Object> offsets = new TreeMap<>();
                    commit.forEach((tp, om) -> offsets.put(tp.toString(), om.offset()));
                    event("committed", Map.of("consumed", consumed, "offsets", offsets));
                }
            }
            consumer.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(Duration.ofSeconds(30)));
        } catch (Exception e) {
            event("error", Map.of("type", e.getClass().getName(), "message", String.valueOf(e.getMessage())));
            System.exit(3);
        }
        event("closed", Map.of("consumed", consumed));
    }

    // --- groups ---------------------------------------------------------------------------------

    private static Map<String, Object> describe(Admin admin, String group) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(60, TimeUnit.SECONDS);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("group", d.groupId());
        out.put("state", d.groupState().toString());
        out.put("type", d.type().toString());
        out.put("simple", d.isSimpleConsumerGroup());
        out.put("assignor", d.partitionAssignor());
        out.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            Map<String, Object> mo = new LinkedHashMap<>();
            mo.put("member_id", m.consumerId());
            mo.put("instance_id", m.groupInstanceId().orElse(null));
            mo.put("client_id", m.clientId());
            mo.put("host", m.host());
            mo.put("assignment", names(m.assignment().topicPartitions()));
            members.add(mo);
        }
        out.put("members", members);
        return out;
    }

    /** Admin.listConsumerGroups, deprecated in 4.1 for listGroups but what existing tools call. */
    @SuppressWarnings("removal")
    private static List<Object> listConsumerGroups(Admin admin) throws Exception {
        List<Object> listed = new ArrayList<>();
        for (ConsumerGroupListing l : admin.listConsumerGroups().all().get(60, TimeUnit.SECONDS)) {
            Map<String, Object> lo = new LinkedHashMap<>();
            lo.put("group", l.groupId());
            lo.put("state", l.groupState().map(Object::toString).orElse(null));
            lo.put("type", l.type().map(Object::toString).orElse(null));
            lo.put("simple", l.isSimpleConsumerGroup());
            listed.add(lo);
        }
        return listed;
    }

    private static List<Object> listGroups(Admin admin) throws Exception {
        List<Object> listed = new ArrayList<>();
        for (GroupListing l : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(60, TimeUnit.SECONDS)) {
            Map<String, Object> lo = new LinkedHashMap<>();
            lo.put("group", l.groupId());
            lo.put("state", l.groupState().map(Object::toString).orElse(null));
            lo.put("type", l.type().map(Object::toString).orElse(null));
            lo.put("protocol", l.protocol());
            lo.put("simple", l.isSimpleConsumerGroup());
            listed.add(lo);
        }
        return listed;
    }

    private static Map<String, Object> groups(Map<String, String> opts) throws Exception {
        String group = need(opts, "group");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(need(opts, "bootstrap"))) {
            out.put("described", describe(admin, group));
            out.put("listed", listConsumerGroups(admin));
            out.put("listed_groups", listGroups(admin));
            String instance = opts.get("remove-instance");
            if (instance != null) {
                MemberToRemove member = new MemberToRemove(instance);
                var result = admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(List.of(member)));
                String error = null;
                try {
                    result.all().get(60, TimeUnit.SECONDS);
                } catch (Exception e) {
                    error = String.valueOf(e.getCause() != null ? e.getCause() : e);
                }
                out.put("removed", Map.of("instance_id", instance, "error", String.valueOf(error)));
                out.put("described_after", describe(admin, group));
            }
        }
        return out;
    }

    // --- JSON -----------------------------------------------------------------------------------

    static final class Json {
        static String write(Object v) {
            StringBuilder sb = new StringBuilder();
            write(sb, v);
            return sb.toString();
        }

        private static void write(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof String) {
                sb.append('"');
                for (char c : ((String) v).toCharArray()) {
                    switch (c) {
                        case '"': sb.append("\\\""); break;
                        case '\\': sb.append("\\\\"); break;
                        case '\n': sb.append("\\n"); break;
                        case '\r': sb.append("\\r"); break;
                        case '\t': sb.append("\\t"); break;
                        default:
                            if (c < 0x20) {
                                sb.append(String.format("\\u%04x", (int) c));
                            } else {
                                sb.append(c);
                            }
                    }
                }
                sb.append('"');
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof Collection) {
                sb.append('[');
                boolean first = true;
                for (Object o : (Collection<?>) v) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, o);
                }
                sb.append(']');
            } else {
                write(sb, v.toString());
            }
        }
    }
}
