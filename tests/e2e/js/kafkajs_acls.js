// KafkaJS's createAcls, describeAcls and deleteAcls against corral, driven by
// tests/e2e/test_acls.py.
//
//   node kafkajs_acls.js CONFIG_JSON
//
// CONFIG_JSON: {"brokers": ["127.0.0.1:PORT"], "sasl": {"mechanism", "username", "password"},
// "topic", "principal", "step": "create" | "delete"}.
//
// create: makes an ALLOW of WRITE and a DENY of DELETE on the topic for the principal, then
// prints {"described": [[resourceType, name, patternType, principal, host, operation,
// permission]...]}: the principal's bindings as describeAcls lists them.
// delete: removes the principal's bindings and prints {"deleted": [...]} (the same shape), then
// {"described": [...]} again in the same object.
// On failure: {"error": err.name, "message": err.message} and exit 1.
'use strict';

const {
  Kafka, logLevel, AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes,
} = require('kafkajs');

const NAMES = {
  resourceType: AclResourceTypes, operation: AclOperationTypes, permissionType: AclPermissionTypes,
  resourcePatternType: ResourcePatternTypes,
};
const name = (kind, code) => Object.keys(NAMES[kind]).find((k) => NAMES[kind][k] === code);

function flat(resources) {
  const out = [];
  for (const r of resources) {
    for (const a of r.acls) {
      out.push([name('resourceType', r.resourceType), r.resourceName, name('resourcePatternType', r.resourcePatternType),
        a.principal, a.host, name('operation', a.operation), name('permissionType', a.permissionType)]);
    }
  }
  return out.sort();
}

async function main(config) {
  const kafka = new Kafka({
    clientId: 'corral-e2e-kafkajs-acls', brokers: config.brokers, sasl: config.sasl, logLevel: logLevel.NOTHING,
    connectionTimeout: 10000, requestTimeout: 30000, retry: { retries: 2 },
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    const mine = {
      resourceType: AclResourceTypes.ANY, resourcePatternType: ResourcePatternTypes.ANY, principal: config.principal,
      operation: AclOperationTypes.ANY, permissionType: AclPermissionTypes.ANY,
    };
    const out = {};
    if (config.step === 'create') {
      const binding = {
        resourceType: AclResourceTypes.TOPIC, resourceName: config.topic, resourcePatternType: ResourcePatternTypes.LITERAL,
        principal: config.principal, host: '*',
      };
      await admin.createAcls({
        acl: [
          { ...binding, operation: AclOperationTypes.WRITE, permissionType: AclPermissionTypes.ALLOW },
          { ...binding, operation: AclOperationTypes.DELETE, permissionType: AclPermissionTypes.DENY },
        ],
      });
    } else {
      const { filterResponses } = await admin.deleteAcls({ filters: [mine] });
      out.deleted = filterResponses.flatMap((f) => f.matchingAcls.map((a) => [name('resourceType', a.resourceType),
        a.resourceName, name('resourcePatternType', a.resourcePatternType), a.principal, a.host,
        name('operation', a.operation), name('permissionType', a.permissionType)])).sort();
    }
    out.described = flat((await admin.describeAcls(mine)).resources);
    console.log(JSON.stringify(out));
  } finally {
    await admin.disconnect();
  }
}

main(JSON.parse(process.argv[2])).catch((err) => {
  console.log(JSON.stringify({ error: err.name, message: err.message }));
  process.exit(1);
});
