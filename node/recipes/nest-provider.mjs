// Recipe: a NestJS provider that owns the Locker: connected when the module starts, closed (its
// leases released) when the application shuts down, and injected wherever a lock is taken.
// Plain JavaScript, so the decorators are applied by hand; in TypeScript write
// `@Injectable() export class LockerService implements OnModuleInit, OnApplicationShutdown`.
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { connect } from 'fencelock';

export class LockerService {
  locker = null;

  async onModuleInit() {
    this.locker = await connect(process.env.FENCELOCK_URL);
  }

  async onApplicationShutdown() {
    await this.locker?.close();
  }

  /** Runs `fn(lease)` holding the lock `name`. */
  withLock(name, options, fn) {
    return this.locker.withLock(name, options, fn);
  }
}
Injectable()(LockerService);

export class LocksModule {}
Module({ providers: [LockerService], exports: [LockerService] })(LocksModule);
