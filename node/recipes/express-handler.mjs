// Recipe: an Express app that serializes the writes to one account across every instance of the
// service. The Locker is made once, at startup, and shared by every request; `withLock` releases
// when the handler's function settles, whatever it throws.
//
//   FENCELOCK_URL=redis://127.0.0.1:6379 node express-handler.mjs
import express from 'express';
import { connect, LockError } from 'fencelock';

export async function createApp(url) {
  const locker = await connect(url);
  const app = express();
  app.post('/accounts/:account/statements', async (req, res) => {
    try {
      const written = await locker.withLock(
        `account-${req.params.account}`,
        { ttl: 30_000, wait: 10_000 },
        async (lease) => {
          // The statement's writes, fenced with lease.token.
          return { account: req.params.account, token: lease.tokenString };
        },
      );
      res.json(written);
    } catch (e) {
      // TIMEOUT: another instance held the account for longer than `wait`.
      res.status(e instanceof LockError && e.code === 'TIMEOUT' ? 409 : 500).json({
        error: e.code ?? 'ERROR',
      });
    }
  });
  return { app, locker };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { app } = await createApp(process.env.FENCELOCK_URL);
  app.listen(Number(process.env.PORT ?? 3000));
}
