import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { parseRmmCsv } from '@stowage/core/plugin-kit';

const HEADER = 'Thread,Time,Action,Pointer,Size,Stream';

describe('parseRmmCsv', () => {
  it('parses each line after the header into a record', () => {
    const text = [HEADER, '0,0.000125,allocate,0x4000,1024,0', '3,12.500000,free,0x4000,1024,7', '0,13.000001,allocate failure,0x0,2097152,0'].join('\n');
    expect(parseRmmCsv(text)).to.deep.equal([
      { thread: 0, timeSeconds: 0.000125, action: 'allocate', address: 0x4000, size: 1024, stream: 0 },
      { thread: 3, timeSeconds: 12.5, action: 'free', address: 0x4000, size: 1024, stream: 7 },
      { thread: 0, timeSeconds: 13.000001, action: 'allocate failure', address: 0, size: 2097152, stream: 0 },
    ]);
  });

  it('accepts a log without a header, with CRLF line ends and a trailing newline', () => {
    expect(parseRmmCsv('0,1,allocate,0xFF,8,0\r\n0,2,free,0xff,8,0\r\n')).to.deep.equal([
      { thread: 0, timeSeconds: 1, action: 'allocate', address: 255, size: 8, stream: 0 },
      { thread: 0, timeSeconds: 2, action: 'free', address: 255, size: 8, stream: 0 },
    ]);
  });

  it('returns no records for an empty log or a header alone', () => {
    expect(parseRmmCsv('')).to.deep.equal([]);
    expect(parseRmmCsv(`${HEADER}\n`)).to.deep.equal([]);
  });

  it('reads the logs RMM writes: columns by header, decimal pointers, hex streams, times of day, deallocate rows, blank lines', () => {
    const text = 'Action,Size,Pointer,Stream,Time\nallocate,16,4096,0x1a,08:20:17.000010\n\ndeallocate,16,0x1000,0x1a,08:20:17.5\n';
    expect(parseRmmCsv(text)).to.deep.equal([
      { thread: 0, timeSeconds: 30017.00001, action: 'allocate', address: 4096, size: 16, stream: 0x1a },
      { thread: 0, timeSeconds: 30017.5, action: 'free', address: 4096, size: 16, stream: 0x1a },
    ]);
    expect(parseRmmCsv('Action,Pointer,Size\nallocate,0x10,8\n')[0]!.timeSeconds, 'no Time column').to.equal(null);
  });

  it('names the source and line of a malformed line, and refuses a header without Action, Pointer and Size', () => {
    expect(() => parseRmmCsv(`${HEADER}\n0,0,allocate,0x10,sixteen,0\n`, 'log.csv')).to.throw(InvalidArgumentError, /^line 2 of log\.csv must be a record .*Size/);
    expect(() => parseRmmCsv('Thread,Time,Pointer\n0,0,0x10\n', 'h.csv')).to.throw(InvalidArgumentError, /header on line 1 of h\.csv/);
  });

  it('rejects a malformed line with InvalidArgumentError naming its line number', () => {
    const cases: [string, RegExp][] = [
      ['0,0.1,allocate,0x10,8', /of 6 comma-separated fields \(it has 5\)/],
      ['0,0.1,malloc,0x10,8,0', /Action/],
      ['0,0.1,allocate,nowhere,8,0', /Pointer/],
      ['0,0.1,allocate,0x10,-8,0', /Size/],
      ['0,0.1,allocate,0x10,1.5,0', /Size/],
      ['x,0.1,allocate,0x10,8,0', /Thread/],
      ['0,-1,allocate,0x10,8,0', /Time/],
      ['0,0.1,allocate,0x10,8,', /Stream/],
      ['0,0.1', /of 6 comma-separated fields \(it has 2\)/],
      [HEADER, /Thread is/],
    ];
    for (const [line, reason] of cases) {
      const text = [HEADER, '0,0.000001,allocate,0x40,8,0', line, '0,0.1,free,0x40,8,0'].join('\n');
      expect(() => parseRmmCsv(text), line)
        .to.throw(InvalidArgumentError, /^line 3 of text must be a record /)
        .with.property('message')
        .that.matches(reason);
    }
  });

  it('rejects text that is not a string', () => {
    expect(() => parseRmmCsv(42 as never)).to.throw(InvalidArgumentError).with.property('argument', 'text');
  });
});
