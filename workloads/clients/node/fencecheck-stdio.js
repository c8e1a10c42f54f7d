// The fencecheck stdio protocol's one unasked line for Node programs (docs/client-protocol.md,
// "Lost-lock notices"): notice(lock, token, reason) tells the worker, now, that the library said
// the lock this program holds (the grant of token, null where it has none) is lost or in doubt.
// One line in one write to stdout, so it never lands inside a reply written the same way
// (process.stdout.write of a whole line).
'use strict';

function notice(lock, token, reason) {
  const line = { op: 'notice', lock, token: token === undefined ? null : token, reason: reason || '' };
  process.stdout.write(JSON.stringify(line) + '\n');
}

module.exports = { notice };
