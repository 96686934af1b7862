import { expect } from 'chai';
import { BenchUsageError, selectByName } from '@stowage/bench-kit';

describe('selectByName (bench-kit)', () => {
  const all = [{ name: 'no-cache' }, { name: 'caching-pytorch' }, { name: 'caching-best' }];

  it('keeps every allocator without names, and the named ones in the list order otherwise', () => {
    expect(selectByName(all, undefined).map((a) => a.name)).to.deep.equal(['no-cache', 'caching-pytorch', 'caching-best']);
    expect(selectByName(all, ['caching-best', 'no-cache']).map((a) => a.name)).to.deep.equal(['no-cache', 'caching-best']);
  });

  it('refuses an unknown name with a usage error that lists the known ones', () => {
    expect(() => selectByName(all, ['nope'])).to.throw(BenchUsageError, 'Unknown allocator nope; known: no-cache, caching-pytorch, caching-best.');
  });
});
