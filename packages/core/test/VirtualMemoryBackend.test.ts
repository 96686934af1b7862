import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { thrownBy } from './engine/helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

describe('VirtualMemoryBackend#constructor', () => {
  it('rejects an alignment that is not a positive power of two, instead of handing out one address twice', () => {
    for (const alignment of [-512, 0, 3]) {
      const error = thrownBy(() => {
        const backend = new VirtualMemoryBackend({ alignment });
        const a = backend.malloc(10)!;
        const b = backend.malloc(10)!;
        // What the bad alignment leads to when accepted: overlapping or unaligned segments.
        expect(a.address + a.byteLength <= b.address && a.address % alignment === 0, `segments with alignment ${alignment}`).to.equal(true);
      });
      expect(error, `alignment ${alignment}`).to.be.instanceOf(InvalidArgumentError);
    }
  });

  it('rejects an unknown option key, naming the nearest known one, rather than ignoring it', () => {
    expect(() => new VirtualMemoryBackend({ capacity: -1 } as object)).to.throw(InvalidArgumentError, /capacityBytes/);
  });

  it('rejects a capacityBytes or pageBytes that is not a byte count', () => {
    expect(thrownBy(() => new VirtualMemoryBackend({ capacityBytes: Number.NaN })), 'capacityBytes NaN').to.be.instanceOf(InvalidArgumentError);
    expect(thrownBy(() => new VirtualMemoryBackend({ pageBytes: 1.5 })), 'pageBytes 1.5').to.be.instanceOf(InvalidArgumentError);
  });
});
