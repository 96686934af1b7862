import { expect } from 'chai';
import fc from 'fast-check';
import { readPickle, UnsafePickleError, writePickle } from '@stowage/snapshot-pickle';
import { pickleValue } from './arbitraries.js';
import { canonical, hasPython, PYTHON_CANONICAL, runPython } from './canonical.js';

/** Loads every pickle on standard input with pickle.load and prints the list of their canonical forms. */
const LOAD_ALL = `${PYTHON_CANONICAL}
import sys, pickle, json
out = []
while True:
    try:
        out.append(canon(pickle.load(sys.stdin.buffer)))
    except EOFError:
        break
print(json.dumps(out))
`;

/** Pickles a fixed set of values in each protocol 2-5; prints [[protocol, base64 pickle, canonical], …]. */
const DUMP_SAMPLES = `${PYTHON_CANONICAL}
import pickle, json, base64
shared = [1]
values = [None, True, False, 0, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, 2**53, -2**63, 2**64, -2**100, 2**2100,
          0.0, -0.0, 1.5, 1e300, float('inf'), float('nan'), '', 'é', '\\U0001F600', 'x' * 300, (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4),
          [], [1, [2]], {}, {'a': 1, 'b': [1, 2.5]}, [shared, shared], {str(i): i for i in range(1500)}, list(range(2500)),
          {'segment_pool_id': (0, 0), 'frames': [{'name': 'f', 'filename': 'x.py', 'line': 3}]}, b'\\x00\\xff']
out = []
for protocol in (2, 3, 4, 5):
    for v in values:
        out.append([protocol, base64.b64encode(pickle.dumps(v, protocol=protocol)).decode(), canon(v)])
print(json.dumps(out))
`;

describe('writePickle and readPickle against Python\'s pickle', function () {
  before(function () {
    if (!hasPython()) {
      console.log('    skipped: python3 is not on PATH, so Python\'s own pickle cannot check ours');
      this.skip();
    }
  });

  it('writes pickles that Python\'s pickle.load reads back as the same values, type for type', () => {
    const values = fc.sample(pickleValue, { numRuns: 400, seed: 23 });
    for (const protocol of [3, 4] as const) {
      const pickles = values.map((v) => writePickle(v, { protocol }));
      const loaded = JSON.parse(runPython(LOAD_ALL, Buffer.concat(pickles))) as unknown[];
      expect(loaded).to.have.length(values.length);
      values.forEach((v, i) => expect(loaded[i], `value ${i}, protocol ${protocol}`).to.deep.equal(canonical(v)));
    }
  });

  it('reads what Python\'s pickle.dumps writes in protocols 2 to 5 as the same values', () => {
    const samples = JSON.parse(runPython(DUMP_SAMPLES)) as [number, string, unknown][];
    let read = 0;
    for (const [protocol, base64, expected] of samples) {
      const data = Buffer.from(base64, 'base64');
      const isBytes = (expected as unknown[])[0] === 'bytes';
      if (protocol === 2 && isBytes) {
        // Protocol 2 has no bytes opcode: Python writes bytes as a call of _codecs.encode, which we refuse.
        expect(() => readPickle(data)).to.throw(UnsafePickleError, /_codecs\.encode/);
        continue;
      }
      expect(canonical(readPickle(data)), `protocol ${protocol}: ${JSON.stringify(expected).slice(0, 80)}`).to.deep.equal(expected);
      read++;
    }
    expect(read).to.equal(samples.length - 1);
  });
});
