// What the KafkaJS test programs share: an assertion that throws, and a bounded wait.
'use strict';

const WAIT_MS = 60000;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function waitFor(what, cond) {
  const deadline = Date.now() + WAIT_MS;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

module.exports = { check, waitFor };
