import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError } from '@stowage/core';
import { MissingFileError, parseRmmCsvLog, readRmmCsv } from '@stowage/lab/replay';

const LOG = `Thread,Time,Action,Pointer,Size,Stream
140202006702080,08:20:17.000010,allocate,0x7f8404000000,256,0x0
140202006702080,08:20:17.000020,allocate failure,0x0,99999999999,0x0
140202006702080,08:20:17.000030,allocate,0x7f8404000200,1024,0x1a
140202006702080,08:20:17.000040,free,0x7f8404000000,256,0x0
140202006702080,08:20:17.000050,free,0x7f84deadbeef,64,0x0
140202006702080,08:20:17.000060,allocate,0x7f8404000000,512,0x0
140202006702080,08:20:17.000070,free,0x7f8404000200,1024,0x1a
`;

describe('parseRmmCsvLog', () => {
  it('links frees to allocations by pointer, ignoring allocation failures and frees of unknown pointers', () => {
    expect(parseRmmCsvLog(LOG)).to.deep.equal([
      { action: 'alloc', id: 0, size: 256, stream: 0, addr: 0x7f8404000000, timeUs: 0 },
      { action: 'alloc', id: 1, size: 1024, stream: 0x1a, addr: 0x7f8404000200, timeUs: 20 },
      { action: 'free_requested', id: 0, size: 256, stream: 0, addr: 0x7f8404000000, timeUs: 30 },
      { action: 'alloc', id: 2, size: 512, stream: 0, addr: 0x7f8404000000, timeUs: 50 },
      { action: 'free_requested', id: 1, size: 1024, stream: 0x1a, addr: 0x7f8404000200, timeUs: 60 },
    ]);
  });

  it('reads times in seconds, decimal pointers, CRLF line ends and deallocate rows', () => {
    const text = 'Thread,Time,Action,Pointer,Size,Stream\r\n1,1634567890.5,allocate,4096,10,0\r\n1,1634567890.75,deallocate,4096,10,0\r\n';
    expect(parseRmmCsvLog(text)).to.deep.equal([
      { action: 'alloc', id: 0, size: 10, stream: 0, addr: 4096, timeUs: 0 },
      { action: 'free_requested', id: 0, size: 10, stream: 0, addr: 4096, timeUs: 250_000 },
    ]);
  });

  it('rejects a malformed line with InvalidArgumentError naming the source and the line', () => {
    const text = 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,16,0x0\n1,0,allocate,0x20,sixteen,0x0\n';
    expect(() => parseRmmCsvLog(text, 'log.csv'))
      .to.throw(InvalidArgumentError)
      .with.property('message')
      .that.contains('line 3 of log.csv');
    expect(() => parseRmmCsvLog('Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10\n', 'short.csv')).to.throw(InvalidArgumentError, /line 2 of short\.csv/);
    expect(() => parseRmmCsvLog('Thread,Time,Action,Pointer,Size,Stream\n1,0,resize,0x10,1,0\n', 'act.csv')).to.throw(InvalidArgumentError, /line 2 of act\.csv .*Action/);
  });

  it('rejects a header without the Action, Pointer and Size columns, and a pointer allocated twice while live', () => {
    expect(() => parseRmmCsvLog('when,what\n1,2\n', 'h.csv')).to.throw(InvalidArgumentError, /line 1 of h\.csv/);
    const twice = 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,16,0\n1,0,allocate,0x10,16,0\n';
    expect(() => parseRmmCsvLog(twice, 't.csv')).to.throw(InvalidArgumentError, /line 3 of t\.csv/);
  });
});

describe('readRmmCsv', () => {
  it('reads a log file and cites its path when a line is malformed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stowage-rmm-'));
    try {
      const good = join(dir, 'good.csv');
      writeFileSync(good, LOG);
      expect(await readRmmCsv(good)).to.have.length(5);
      const bad = join(dir, 'bad.csv');
      writeFileSync(bad, 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,nowhere,16,0\n');
      const error = await readRmmCsv(bad).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.contain(`line 2 of ${bad}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects a missing path with MissingFileError and a directory with InvalidArgumentError, each naming the path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stowage-rmm-'));
    try {
      const missing = join(dir, 'none.csv');
      const error = await readRmmCsv(missing).then(() => undefined, (e: unknown) => e);
      expect(error).to.be.instanceOf(MissingFileError);
      expect((error as Error).message).to.match(/^No file at .*none\.csv; give the path of an RMM log/);
      const directory = await readRmmCsv(dir).then(() => undefined, (e: unknown) => e);
      expect(directory).to.be.instanceOf(InvalidArgumentError);
      expect((directory as Error).message).to.match(/^path must be the path of an RMM log .*, not a directory/).and.to.contain(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
