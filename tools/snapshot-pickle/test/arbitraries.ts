import fc from 'fast-check';
import type { PickleDict, PickleValue } from '@stowage/snapshot-pickle';
import { PickleFloat, PickleTuple, setPickleItem } from '@stowage/snapshot-pickle';

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export const pickleString = fc.string({ unit: 'binary', maxLength: 40 }).filter((s) => !LONE_SURROGATE.test(s));

/** Ints as the reader returns them: safe integers as numbers, others as bigints. */
export const pickleInt: fc.Arbitrary<number | bigint> = fc.oneof(
  fc.integer({ min: -300, max: 70_000 }),
  fc.integer(),
  fc.maxSafeInteger(),
  fc.bigInt({ min: -(2n ** 2200n), max: 2n ** 2200n }).map((b) => (b >= 0n ? b + 2n ** 53n : b - 2n ** 53n)),
);

/** Floats as the reader returns them: integral ones (and -0) as PickleFloat. */
export const pickleFloat: fc.Arbitrary<number | PickleFloat> = fc.double().map((d) => (Number.isInteger(d) ? new PickleFloat(d) : d));

/** Trees of every PickleValue type, in the form readPickle returns them. */
export const pickleValue: fc.Arbitrary<PickleValue> = fc.letrec<{ value: PickleValue }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    pickleInt,
    pickleFloat,
    pickleString,
    fc.uint8Array({ maxLength: 300 }),
    fc.array(tie('value'), { maxLength: 5 }).map((items) => new PickleTuple(items)),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.array(fc.tuple(pickleString, tie('value')), { maxLength: 5 }).map((entries) => {
      const dict: PickleDict = {};
      for (const [k, v] of entries) setPickleItem(dict, k, v);
      return dict;
    }),
  ),
})).value;
