// KafkaJS against corral's TLS and SASL listeners, driven by tests/e2e/test_security_clients.py.
//
//   node kafkajs_security.js CONFIG_JSON
//
// CONFIG_JSON: {"brokers": ["127.0.0.1:PORT"], "ssl": {"ca": PATH, "cert": PATH, "key": PATH} or
// false (cert and key optional), "sasl": {"mechanism": "plain"|"scram-sha-256"|"scram-sha-512",
// "username", "password"} or absent, "topic", "group", "partitions" (2), "count" (100),
// "retries" (KafkaJS's retry.retries, 5; 0 makes a refusal fail at once)}.
//
// Creates the topic, produces COUNT records, consumes them in the consumer group, commits the
// offsets after the last record and reads them back with admin.fetchOffsets. Prints one JSON
// line {"produced": n, "consumed": m, "distinct": d, "committed": c} (n: the sum of the topic's
// high watermarks after producing, m: records delivered, d: distinct values among them, c: the
// sum of the committed offsets); on failure {"error": err.name, "message": err.message, "causes": [{"error",
// "message", "code"}...]} (causes: err.cause, its cause, ...) and exits 1.
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');
const { check, waitFor } = require('./checks');

function sslOptions(ssl) {
  if (!ssl) return undefined;
  const out = {};
  if (ssl.ca) out.ca = [fs.readFileSync(ssl.ca, 'utf-8')];
  if (ssl.cert) out.cert = fs.readFileSync(ssl.cert, 'utf-8');
  if (ssl.key) out.key = fs.readFileSync(ssl.key, 'utf-8');
  return out;
}

async function main(config) {
  const { brokers, topic, group } = config;
  const partitions = config.partitions || 2;
  const count = config.count || 100;
  const kafka = new Kafka({
    clientId: 'corral-e2e-kafkajs-security',
    brokers,
    ssl: sslOptions(config.ssl),
    sasl: config.sasl || undefined,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: config.retries === undefined ? 5 : config.retries },
  });

  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });
    check(created === true, `createTopics returned ${created}`);

    const producer = kafka.producer();
    await producer.connect();
    const messages = [];
    for (let i = 0; i < count; i++) messages.push({ key: `k${i}`, value: `v${i}`, partition: i % partitions });
    const results = await producer.send({ topic, acks: -1, messages });
    await producer.disconnect();
    for (const r of results) check(r.errorCode === 0, `partition ${r.partition}: error ${r.errorCode}`);
    // What the topic holds: the sum of its high watermarks.
    const produced = (await admin.fetchTopicOffsets(topic)).reduce((sum, o) => sum + Number(o.high), 0);

    const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 100 });
    let crashed = null;
    consumer.on(consumer.events.CRASH, (e) => {
      crashed = e.payload.error;
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const seen = new Set();
    const next = {};
    let consumed = 0;
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        consumed++;
        seen.add(message.value.toString());
        next[partition] = Math.max(next[partition] || 0, Number(message.offset) + 1);
      },
    });
    await waitFor(`${count} records consumed (have ${seen.size})`, () => {
      if (crashed) throw crashed;
      return seen.size >= count;
    });
    await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset: String(offset) })));
    await consumer.disconnect();

    const fetched = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const committed = fetched[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0);
    process.stdout.write(JSON.stringify({ produced, consumed, distinct: seen.size, committed }) + '\n');
  } finally {
    await admin.disconnect();
  }
}

function causes(e) {
  const out = [];
  for (let c = e && e.cause; c && c !== e && out.length < 16; c = c.cause) {
    out.push({ error: c.name, message: c.message, code: c.code === undefined ? null : c.code });
  }
  return out;
}

const [configArg] = process.argv.slice(2);
if (!configArg) {
  console.error('usage: node kafkajs_security.js CONFIG_JSON');
  process.exit(2);
}
main(JSON.parse(configArg)).then(
  () => process.exit(0),
  (e) => {
    console.error(e && e.stack ? e.stack : e);
    process.stdout.write(JSON.stringify({ error: e && e.name, message: e && e.message, causes: causes(e) }) + '\n');
    process.exit(1);
  }
);
