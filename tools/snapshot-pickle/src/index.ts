export type { PickleDict, PickleValue } from './PickleValue.js';
export { isPickleDict, PickleFloat, pickleNumber, PickleTuple, setPickleItem } from './PickleValue.js';
export { MalformedPickleError, UnsafePickleError } from './PickleError.js';
export { readPickle } from './readPickle.js';
export type { WritePickleOptions } from './writePickle.js';
export { writePickle } from './writePickle.js';
