// ESM entry point: the same objects as the CommonJS entry (index.js).
import fencelock from './index.js';

export const {
  connect,
  setLogger,
  droppedLogRecords,
  droppedMeasurements,
  droppedSpans,
  Locker,
  Lease,
  MultiLease,
  Leadership,
  Fence,
  LockError,
  AbortError,
  DriverError,
  ERROR_CODES,
  version,
} = fencelock;
export default fencelock;
