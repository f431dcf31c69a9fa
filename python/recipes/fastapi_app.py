"""Recipe: a FastAPI app whose lifespan owns the Locker: connected once at startup (without
blocking the event loop), closed at shutdown (its leases released), and shared by every request.
Handlers take locks with ``async with``: a blocking ``with`` inside ``async def`` would stall the
loop, and fencelock refuses it (``fencelock.BlockingCallInEventLoop``).

    FENCELOCK_URL=sqlite:///var/lib/app/locks.db uvicorn fastapi_app:app
"""

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator, Dict

from fastapi import FastAPI, Request

import fencelock


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.locker = await fencelock.connect_async(os.environ["FENCELOCK_URL"])
    try:
        yield
    finally:
        await app.state.locker.close_async()


app = FastAPI(lifespan=lifespan)


@app.post("/accounts/{account}/statements")
async def write_statement(account: str, request: Request) -> Dict[str, str]:
    locker: fencelock.Locker = request.app.state.locker
    async with locker.lock(f"account-{account}", ttl=30, wait=10) as lease:
        # The statement's writes, fenced with lease.token. JSON has no 64-bit integers: send
        # the token as text.
        return {"account": account, "token": str(lease.token)}
