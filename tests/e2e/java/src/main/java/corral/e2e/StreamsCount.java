package corral.e2e;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams 4.4 application for tests/e2e/test_kafka_streams.py: it counts the words
 * (record values) of INPUT into an in-memory store, writing each new count to OUTPUT.
 *
 * <p>{@code StreamsCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR TOTAL} runs until the
 * counts in its store add up to TOTAL, runs 2.5 s more, then closes (committing) and prints them
 * as one JSON object, {@code {"counts": {word: count, ...}}}, or exits 1 after two minutes.
 *
 * <p>What it needs from the broker: its internal topics created with Streams' configs (the
 * store's changelog compacted, the repartition topic purged with DeleteRecords every second),
 * a classic group with Streams' own assignor, and, since the store is in memory, the whole
 * state restored from the compacted changelog at every start.
 */
public final class StreamsCount {
    private static final String STORE = "counts";

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: StreamsCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR TOTAL");
            System.exit(2);
        }
        String input = args[2];
        String output = args[3];
        long total = Long.parseLong(args[5]);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore(STORE))
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // Every update goes to the changelog (no cache in front of the store).
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // Internal topics roll their segments often, so corral's cleaner gets to compact the
        // changelog while the test runs.
        props.put(StreamsConfig.topicPrefix("segment.ms"), "300");
        props.put(StreamsConfig.topicPrefix("min.cleanable.dirty.ratio"), "0.01");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Streams members do not leave the group when they close: the next run's member waits
        // for the last one's session to end.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);

        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setUncaughtExceptionHandler(e -> {
                e.printStackTrace();
                System.exit(1);
                return null;
            });
            streams.start();
            long deadline = System.nanoTime() + Duration.ofMinutes(2).toNanos();
            Map<String, Long> counts = new TreeMap<>();
            while (sum(counts) != total) {
                if (System.nanoTime() > deadline) {
                    System.err.println("counts " + counts + " never added up to " + total + "; state " + streams.state());
                    System.exit(1);
                }
                Thread.sleep(200);
                counts = read(streams);
            }
            // A few more commits, and a purge of the repartition topic, before closing.
            Thread.sleep(2500);
            streams.close(Duration.ofSeconds(60));
            StringBuilder json = new StringBuilder("{\"counts\": {");
            String sep = "";
            for (Map.Entry<String, Long> e : counts.entrySet()) {
                json.append(sep).append('"').append(e.getKey()).append("\": ").append(e.getValue());
                sep = ", ";
            }
            System.out.println(json.append("}}"));
        }
    }

    /** The store's counts, empty while the application is not running yet. */
    private static Map<String, Long> read(KafkaStreams streams) {
        Map<String, Long> counts = new TreeMap<>();
        if (streams.state() != KafkaStreams.State.RUNNING) {
            return counts;
        }
        try {
            ReadOnlyKeyValueStore<String, Long> store =
                    streams.store(StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
            try (KeyValueIterator<String, Long> all = store.all()) {
                while (all.hasNext()) {
                    KeyValue<String, Long> kv = all.next();
                    counts.put(kv.key, kv.value);
                }
            }
        } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
            // Restoring or rebalancing: not queryable yet.
        }
        return counts;
    }

    private static long sum(Map<String, Long> counts) {
        return counts.values().stream().mapToLong(Long::longValue).sum();
    }
}
