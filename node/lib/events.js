'use strict';
// The core's lifecycle event kinds and the names a Locker emits them under (docs/design.md
// §7.1), apart from index.js so that test/contract.test.mjs checks the very table Locker uses.

/** The core's kind (`renewal_retried`) to the event name Node listeners use (`renewalRetried`). */
const EVENT_NAMES = Object.freeze({
  acquired: 'acquired',
  renewed: 'renewed',
  renewal_retried: 'renewalRetried',
  suspended: 'suspended',
  resumed: 'resumed',
  lost: 'lost',
  released: 'released',
  deployment_mismatch: 'deploymentMismatch',
});

/** The names whose listeners start the native subscription: every kind, and 'event' for all. */
const LIFECYCLE_EVENTS = new Set([...Object.values(EVENT_NAMES), 'event']);

module.exports = { EVENT_NAMES, LIFECYCLE_EVENTS };
