// KafkaJS consumer group against corral: two consumers in one group, subscribe + run with
// autoCommit, driven by tests/e2e/test_groups_other_clients.py.
//
//   node kafkajs_group.js BOOTSTRAP TOPIC GROUP PARTITIONS COUNT
//
// 1. Two consumers join GROUP and subscribe to TOPIC (fromBeginning); waits until their
//    assignments (GROUP_JOIN events) cover every partition exactly once.
// 2. Describes the group with KafkaJS's admin (state, members, decoded assignments).
// 3. Produces COUNT records with KafkaJS's producer, waits until the consumers have processed
//    them all (autoCommit commits after each batch), disconnects the consumers (which commits
//    what is left) and reads the group's committed offsets back with admin.fetchOffsets.
// Prints one JSON line on stdout with what it saw; exits non-zero on any failure.
'use strict';

const { Kafka, logLevel, AssignerProtocol } = require('kafkajs');
const { check, waitFor } = require('./checks');

const [bootstrap, topic, groupId, partitionsArg, countArg] = process.argv.slice(2);
if (!bootstrap || !topic || !groupId || !partitionsArg || !countArg) {
  console.error('usage: node kafkajs_group.js BOOTSTRAP TOPIC GROUP PARTITIONS COUNT');
  process.exit(2);
}
const PARTITIONS = Number(partitionsArg);
const COUNT = Number(countArg);

async function main() {
  const kafka = new Kafka({
    clientId: 'corral-e2e-kafkajs-group',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 5 },
  });

  const consumed = [];
  const assignments = [null, null];
  const memberIds = [null, null];
  const consumers = [0, 1].map((i) => {
    const c = kafka.consumer({
      groupId,
      sessionTimeout: 10000,
      rebalanceTimeout: 10000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 100,
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      assignments[i] = (e.payload.memberAssignment[topic] || []).slice().sort();
      memberIds[i] = e.payload.memberId;
    });
    return c;
  });

  for (const [i, c] of consumers.entries()) {
    await c.connect();
    await c.subscribe({ topics: [topic], fromBeginning: true });
    await c.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        consumed.push({ consumer: i, partition, offset: Number(message.offset), key: message.key.toString() });
      },
    });
  }

  // Both joined and every partition is owned by exactly one of them.
  const covered = () => {
    if (!assignments[0] || !assignments[1] || !assignments[0].length || !assignments[1].length) return false;
    const all = assignments[0].concat(assignments[1]).sort((a, b) => a - b);
    return JSON.stringify(all) === JSON.stringify([...Array(PARTITIONS).keys()]);
  };
  await waitFor(`both consumers to own partitions: ${JSON.stringify(assignments)}`, covered);

  const admin = kafka.admin();
  await admin.connect();
  let described;
  for (let attempt = 0; attempt < 600; attempt++) {
    const { groups } = await admin.describeGroups([groupId]);
    described = groups[0];
    if (described.state === 'Stable' && described.members.length === 2) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check(described.state === 'Stable', `describeGroups state ${described.state}`);
  check(described.protocolType === 'consumer', `protocolType ${described.protocolType}`);
  const describedAssignments = {};
  for (const m of described.members) {
    const decoded = AssignerProtocol.MemberAssignment.decode(m.memberAssignment);
    describedAssignments[m.memberId] = (decoded.assignment[topic] || []).slice().sort();
    check(m.clientId === 'corral-e2e-kafkajs-group', `clientId ${m.clientId}`);
  }
  for (const i of [0, 1]) {
    check(
      JSON.stringify(describedAssignments[memberIds[i]]) === JSON.stringify(assignments[i]),
      `consumer ${i}: describeGroups says ${JSON.stringify(describedAssignments[memberIds[i]])}, GROUP_JOIN said ${JSON.stringify(assignments[i])}`
    );
  }

  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < COUNT; i++) messages.push({ key: `js${i}`, value: `kafkajs group record ${i}`, partition: i % PARTITIONS });
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  await waitFor(`${COUNT} records consumed (have ${consumed.length})`, () => consumed.length >= COUNT);
  for (const c of consumers) await c.disconnect();

  const fetched = await admin.fetchOffsets({ groupId, topics: [topic] });
  const committed = {};
  for (const p of fetched[0].partitions) committed[p.partition] = Number(p.offset);
  await admin.disconnect();

  process.stdout.write(JSON.stringify({ consumed, assignments, memberIds, committed, state: described.state }) + '\n');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
