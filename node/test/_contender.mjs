// One contending process (run by backends.test.mjs): fenced critical sections on one lock.
//
// Inside each critical section it checks, with a marker file made with O_EXCL, that nobody
// else is inside; does a read-modify-write of a counter in a plain file (an overlap would lose
// an update); and writes through the fence: the counter row and a log row with its token.
import {
  openSync,
  closeSync,
  readFileSync,
  writeFileSync,
  renameSync,
  unlinkSync,
  constants,
} from 'node:fs';
import { join } from 'node:path';

import { connect, Fence } from '../index.mjs';

const [lockUrl, dataUrl, folder, name, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);
const marker = join(folder, 'inside');
const countFile = join(folder, 'count');
let overlaps = 0;

const locker = await connect(lockUrl);
const fence = await Fence.open(dataUrl, 'counter');
try {
  for (let i = 0; i < rounds; i++) {
    await locker.withLock(name, { ttl: 10_000, wait: 300_000 }, async (lease) => {
      let mine = false;
      try {
        closeSync(openSync(marker, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY));
        mine = true;
      } catch {
        overlaps += 1;
      }
      const n = Number(readFileSync(countFile, 'utf8'));
      await fence.fencedExecute(lease, [
        'UPDATE counter SET n = n + 1 WHERE id = 1',
        ['INSERT INTO log (token, n) SELECT ?, n FROM counter WHERE id = 1', [lease.token]],
      ]);
      writeFileSync(`${countFile}.tmp`, String(n + 1));
      renameSync(`${countFile}.tmp`, countFile);
      if (mine) unlinkSync(marker);
    });
  }
} finally {
  await fence.close();
  await locker.close();
}
console.log(`done ${overlaps}`);
