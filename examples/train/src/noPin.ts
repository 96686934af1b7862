import type { PinScope } from './Ops.js';

const unpinned: Disposable = { [Symbol.dispose]() {} };

/** The PinScope of a runtime without LMS: every storage stays resident, so its guard does nothing. */
export const noPin: PinScope = () => unpinned;
