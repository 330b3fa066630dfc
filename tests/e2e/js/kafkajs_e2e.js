// KafkaJS against corral: admin (topics and their configs), idempotent producer (plain and gzip),
// offsets.
//
//   node kafkajs_e2e.js BOOTSTRAP TOPIC
//
// Prints one JSON line on stdout: {"produced": [{key, value, partition, offset, compression}]}
// for tests/e2e/test_kafkajs.py to read back with another client (KafkaJS's consumer needs
// consumer groups, which corral does not serve yet). Exits non-zero on any failure.
'use strict';

const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel } = require('kafkajs');
const { check } = require('./checks');

const [bootstrap, topic] = process.argv.slice(2);
if (!bootstrap || !topic) {
  console.error('usage: node kafkajs_e2e.js BOOTSTRAP TOPIC');
  process.exit(2);
}

const PARTITIONS = 2;
const BATCHES = 5;
const PER_BATCH = 20;

async function main() {
  const kafka = new Kafka({
    clientId: 'corral-e2e-kafkajs',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 5 },
  });

  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
    waitForLeaders: true,
  });
  check(created === true, `createTopics returned ${created}`);
  // KafkaJS reports an existing topic as `false` rather than an error.
  const again = await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }] });
  check(again === false, `second createTopics returned ${again}, expected false (already exists)`);

  const names = await admin.listTopics();
  check(names.includes(topic), `listTopics does not include ${topic}: ${names}`);
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
  const partitions = metadata.topics[0].partitions.map((p) => p.partitionId).sort();
  check(JSON.stringify(partitions) === JSON.stringify([0, 1]), `partitions ${partitions}`);

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const produced = [];
  for (const [compression, label] of [
    [CompressionTypes.None, 'none'],
    [CompressionTypes.GZIP, 'gzip'],
  ]) {
    for (let batch = 0; batch < BATCHES; batch++) {
      const messages = [];
      for (let i = 0; i < PER_BATCH; i++) {
        messages.push({
          key: `${label}-${batch}-${i}`,
          value: `kafkajs ${label} batch ${batch} message ${i} `.repeat(3),
          partition: i % PARTITIONS,
        });
      }
      const results = await producer.send({ topic, acks: -1, compression, messages });
      for (const r of results) {
        check(r.errorCode === 0, `partition ${r.partition}: error ${r.errorCode}`);
        const inPartition = messages.filter((m) => m.partition === r.partition);
        inPartition.forEach((m, k) => {
          produced.push({
            key: m.key,
            value: m.value,
            partition: r.partition,
            offset: Number(r.baseOffset) + k,
            compression: label,
          });
        });
      }
      check(results.length === PARTITIONS, `send answered ${results.length} partitions`);
    }
  }
  await producer.disconnect();
  check(produced.length === 2 * BATCHES * PER_BATCH, `${produced.length} messages acknowledged`);

  // High watermarks equal what was acknowledged, per partition.
  const offsets = await admin.fetchTopicOffsets(topic);
  for (const o of offsets) {
    const count = produced.filter((m) => m.partition === o.partition).length;
    check(Number(o.high) === count, `partition ${o.partition}: high ${o.high}, acknowledged ${count}`);
    check(Number(o.low) === 0, `partition ${o.partition}: low ${o.low}`);
  }
  // Earliest offsets by timestamp (ListOffsets with a timestamp).
  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, 0);
  for (const o of byTime) {
    check(Number(o.offset) === 0, `partition ${o.partition}: offset for timestamp 0 is ${o.offset}`);
  }

  // Create and delete a scratch topic.
  const scratch = `${topic}-scratch`;
  check(await admin.createTopics({ topics: [{ topic: scratch, numPartitions: 1 }] }), 'scratch create');
  await admin.deleteTopics({ topics: [scratch], timeout: 30000 });
  const after = await admin.listTopics();
  check(!after.includes(scratch), `deleted topic ${scratch} still listed`);
  check(after.includes(topic), `${topic} vanished`);

  // Change the topic's configs (AlterConfigs: the keys named become its whole set) and read them back.
  const configs = async () => {
    const described = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }] });
    const entries = described.resources[0].configEntries;
    return Object.fromEntries(entries.filter((e) => !e.readOnly && e.configSource === 1).map((e) => [e.configName, e.configValue]));
  };
  const entry = (name, value) => ({ name, value });
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [entry('retention.ms', '7200000'), entry('segment.ms', '900000')] }],
  });
  let set = await configs();
  check(JSON.stringify(set) === JSON.stringify({ 'retention.ms': '7200000', 'segment.ms': '900000' }), `configs after alterConfigs: ${JSON.stringify(set)}`);
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [entry('retention.ms', '3600000')] }] });
  set = await configs();
  check(JSON.stringify(set) === JSON.stringify({ 'retention.ms': '3600000' }), `configs after the second alterConfigs: ${JSON.stringify(set)}`);
  let refused = null;
  try {
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [entry('no.such.config', '1')] }] });
  } catch (e) {
    refused = e;
  }
  check(refused && refused.type === 'INVALID_CONFIG', `an unknown config key: ${refused && refused.type}`);

  // deleteTopicRecords, on a topic of its own (the main topic is read whole afterwards).
  const cut = `${topic}-cut`;
  await admin.createTopics({ topics: [{ topic: cut, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
  const cutter = kafka.producer();
  await cutter.connect();
  await cutter.send({ topic: cut, acks: -1, messages: [0, 1, 2, 3, 4].map((i) => ({ value: `cut ${i}` })) });
  await cutter.disconnect();
  // The admin finds leaders only among the topics its metadata covers.
  await admin.fetchTopicMetadata({ topics: [cut] });
  await admin.deleteTopicRecords({ topic: cut, partitions: [{ partition: 0, offset: '3' }] });
  const [bounds] = await admin.fetchTopicOffsets(cut);
  check(Number(bounds.low) === 3 && Number(bounds.high) === 5, `after deleteTopicRecords: low ${bounds.low}, high ${bounds.high}`);

  await admin.disconnect();
  process.stdout.write(JSON.stringify({ produced }) + '\n');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
