import { expect } from 'chai';
import fc from 'fast-check';
import type { AllocatorConf } from '@stowage/allocator-cuda';
import { AllocatorConfError, formatAllocatorConf, parseAllocatorConf, readAllocatorConfFromEnv } from '@stowage/allocator-cuda';
import { ALLOCATOR_CONF_KEYS, allocatorConfEngineOptions, DEFAULT_ALLOCATOR_CONF_VALUES } from '@stowage/allocator-cuda/driver';
import { CachingAllocator, InvalidArgumentError, isStowageError } from '@stowage/core';
import { VirtualMemoryBackend } from '@stowage/core/testing';

const MiB = 2 ** 20;

function thrown(fn: () => unknown): AllocatorConfError {
  try {
    fn();
  } catch (error) {
    expect(error).to.be.instanceOf(AllocatorConfError);
    return error as AllocatorConfError;
  }
  throw new Error('expected the call to throw');
}

/** The message `text` fails with. */
function messageOf(text: string): string {
  return thrown(() => parseAllocatorConf(text)).message;
}

/** Sixteen per-interval values from runs of [count, value]. */
function runs(...parts: [count: number, value: number][]): number[] {
  const list = parts.flatMap(([count, value]) => new Array<number>(count).fill(value));
  expect(list).to.have.length(16);
  return list;
}

function withoutText(conf: AllocatorConf): Omit<AllocatorConf, 'text'> {
  const { text: _text, ...rest } = conf;
  return rest;
}

describe('parseAllocatorConf', function () {
  it('refuses what is not a string (null, undefined, a number, an object) with InvalidArgumentError, not a TypeError', function () {
    for (const bad of [null, undefined, 3, {}, ['expandable_segments:True']]) {
      expect(() => parseAllocatorConf(bad as string), String(bad)).to.throw(InvalidArgumentError, /PYTORCH_CUDA_ALLOC_CONF string/);
    }
  });

  it("gives PyTorch's defaults for an empty string", function () {
    const conf = parseAllocatorConf('');
    expect(conf).to.deep.include({
      maxSplitSizeBytes: Number.POSITIVE_INFINITY,
      maxNonSplitRoundingBytes: 20 * MiB,
      garbageCollectionThreshold: 0,
      roundupPower2Divisions: runs([16, 0]),
      expandableSegments: false,
      pinnedUseBackgroundThreads: false,
      backend: 'native',
      releaseLockOnCudaMalloc: false,
      pinnedUseCudaHostRegister: false,
      pinnedNumRegisterThreads: 1,
      pinnedReserveSegmentSizeMb: 0,
      graphCaptureRecordStreamReuse: false,
      perProcessMemoryFraction: 1,
      givenKeys: [],
      notApplied: [],
      text: '',
    });
    expect(withoutText(conf)).to.deep.equal({ ...DEFAULT_ALLOCATOR_CONF_VALUES, givenKeys: [], notApplied: [] });
  });

  it('gives the defaults for a string of whitespace only', function () {
    expect(withoutText(parseAllocatorConf(' \t\n'))).to.deep.equal(withoutText(parseAllocatorConf('')));
  });

  it('returns a frozen object, its arrays included', function () {
    const conf = parseAllocatorConf('roundup_power2_divisions:4,backend:cudaMallocAsync');
    expect(Object.isFrozen(conf)).to.equal(true);
    expect(Object.isFrozen(conf.roundupPower2Divisions)).to.equal(true);
    expect(Object.isFrozen(conf.givenKeys)).to.equal(true);
    expect(Object.isFrozen(conf.notApplied)).to.equal(true);
    expect(Object.isFrozen(conf.notApplied[0])).to.equal(true);
  });

  it('reads sizes in MiB as bytes', function () {
    const conf = parseAllocatorConf('max_split_size_mb:512,max_non_split_rounding_mb:64');
    expect(conf.maxSplitSizeBytes).to.equal(512 * MiB);
    expect(conf.maxNonSplitRoundingBytes).to.equal(64 * MiB);
  });

  it('accepts 20 MiB, the least size PyTorch accepts', function () {
    expect(parseAllocatorConf('max_split_size_mb:20').maxSplitSizeBytes).to.equal(20 * MiB);
    expect(parseAllocatorConf('max_non_split_rounding_mb:20').maxNonSplitRoundingBytes).to.equal(20 * MiB);
  });

  it('reads a size beyond 2^53 - 1 bytes as unlimited, as PyTorch clamps it to SIZE_MAX', function () {
    expect(parseAllocatorConf('max_split_size_mb:18446744073709551615').maxSplitSizeBytes).to.equal(Number.POSITIVE_INFINITY);
    expect(parseAllocatorConf('max_split_size_mb:8589934591').maxSplitSizeBytes).to.equal(8589934591 * MiB);
    expect(parseAllocatorConf('max_split_size_mb:8589934592').maxSplitSizeBytes).to.equal(Number.POSITIVE_INFINITY);
  });

  it('reads the fractions', function () {
    const conf = parseAllocatorConf('garbage_collection_threshold:0.6,per_process_memory_fraction:.25');
    expect(conf.garbageCollectionThreshold).to.equal(0.6);
    expect(conf.perProcessMemoryFraction).to.equal(0.25);
    expect(parseAllocatorConf('per_process_memory_fraction:0').perProcessMemoryFraction).to.equal(0);
    expect(parseAllocatorConf('per_process_memory_fraction:1.0').perProcessMemoryFraction).to.equal(1);
    expect(parseAllocatorConf('garbage_collection_threshold:5e-1').garbageCollectionThreshold).to.equal(0.5);
  });

  it('reads every True/False key', function () {
    const conf = parseAllocatorConf(
      'expandable_segments:True,pinned_use_background_threads:True,release_lock_on_cudamalloc:True,' +
        'pinned_use_cuda_host_register:True,graph_capture_record_stream_reuse:True',
    );
    expect(conf).to.deep.include({
      expandableSegments: true,
      pinnedUseBackgroundThreads: true,
      releaseLockOnCudaMalloc: true,
      pinnedUseCudaHostRegister: true,
      graphCaptureRecordStreamReuse: true,
    });
    expect(parseAllocatorConf('expandable_segments:False').expandableSegments).to.equal(false);
  });

  it('accepts the ROCm spellings of two keys and records them under their CUDA names', function () {
    const conf = parseAllocatorConf('release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True');
    expect(conf.releaseLockOnCudaMalloc).to.equal(true);
    expect(conf.pinnedUseCudaHostRegister).to.equal(true);
    expect(conf.givenKeys).to.deep.equal(['release_lock_on_cudamalloc', 'pinned_use_cuda_host_register']);
  });

  it('reads the backend, the pinned thread count and the pinned reserve', function () {
    const conf = parseAllocatorConf('backend:cudaMallocAsync,pinned_num_register_threads:128,pinned_reserve_segment_size_mb:64');
    expect(conf.backend).to.equal('cudaMallocAsync');
    expect(conf.pinnedNumRegisterThreads).to.equal(128);
    expect(conf.pinnedReserveSegmentSizeMb).to.equal(64);
    expect(parseAllocatorConf('backend:native').backend).to.equal('native');
  });

  it('records the given keys once each, in order of first appearance, and keeps the original string', function () {
    const text = 'expandable_segments:True, max_split_size_mb:100, expandable_segments:False';
    const conf = parseAllocatorConf(text);
    expect(conf.givenKeys).to.deep.equal(['expandable_segments', 'max_split_size_mb']);
    expect(conf.expandableSegments).to.equal(false, 'a later pair overrides an earlier one');
    expect(conf.text).to.equal(text);
  });

  it('ignores whitespace anywhere, even inside a word, as PyTorch does', function () {
    const a = parseAllocatorConf(' max_split _size_mb : 1 00 ,\troundup_power2_divisions: [ 256 : 1 ,\n >:4 ] ');
    const b = parseAllocatorConf('max_split_size_mb:100,roundup_power2_divisions:[256:1,>:4]');
    expect(withoutText(a)).to.deep.equal(withoutText(b));
  });

  it('gives the same values whatever the order of the keys', function () {
    const a = parseAllocatorConf('max_split_size_mb:100,garbage_collection_threshold:0.5,expandable_segments:True');
    const b = parseAllocatorConf('expandable_segments:True,garbage_collection_threshold:0.5,max_split_size_mb:100');
    expect({ ...withoutText(a), givenKeys: [] }).to.deep.equal({ ...withoutText(b), givenKeys: [] });
  });

  it('accepts a trailing comma', function () {
    expect(parseAllocatorConf('expandable_segments:True,').expandableSegments).to.equal(true);
  });
});

describe('parseAllocatorConf roundup_power2_divisions', function () {
  const divisions = (value: string): readonly number[] => parseAllocatorConf(`roundup_power2_divisions:${value}`).roundupPower2Divisions;

  it('gives every interval the one value of the plain form', function () {
    expect(divisions('4')).to.deep.equal(runs([16, 4]));
    expect(divisions('1')).to.deep.equal(runs([16, 1]));
  });

  it("expands [256:1,512:2,>:4]: the first entry fills below it, '>' fills above the last", function () {
    // 256 MiB is interval 8 (0-7 filled below it), 512 MiB interval 9, '>' fills 10-15.
    expect(divisions('[256:1,512:2,>:4]')).to.deep.equal(runs([9, 1], [1, 2], [6, 4]));
  });

  it('leaves 0 in an interval between two entries that no entry names', function () {
    // PyTorch's own example: 64 MiB is interval 6, 256 MiB 8, 1024 MiB 10; intervals 7 and 9 stay 0.
    expect(divisions('[64:8,256:4,1024:4,>:1]')).to.deep.equal([8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 4, 1, 1, 1, 1, 1]);
  });

  it("fills all but the first interval when '>' comes first", function () {
    expect(divisions('[>:4]')).to.deep.equal(runs([1, 0], [15, 4]));
  });

  it('names interval 0 with boundary 1 and leaves the others 0', function () {
    expect(divisions('[1:4]')).to.deep.equal(runs([1, 4], [15, 0]));
  });

  it('clamps a boundary above 32 GiB to the last interval', function () {
    expect(divisions('[65536:2]')).to.deep.equal(runs([16, 2]));
    expect(divisions('[32768:2]')).to.deep.equal(runs([16, 2]));
  });

  it('applies entries in the order written, the first one filling below it', function () {
    expect(divisions('[512:2,256:1]')).to.deep.equal(runs([8, 2], [1, 1], [1, 2], [6, 0]));
  });

  it('accepts 0 in a list to turn an interval off, an empty list, and a trailing comma', function () {
    expect(divisions('[256:0,>:2]')).to.deep.equal(runs([9, 0], [7, 2]));
    expect(divisions('[]')).to.deep.equal(runs([16, 0]));
    expect(divisions('[256:1,]')).to.deep.equal(runs([9, 1], [7, 0]));
  });
});

describe('parseAllocatorConf errors', function () {
  it("names an unknown key in PyTorch's words, with the nearest known key", function () {
    expect(messageOf('max_split_sise_mb:100')).to.equal("Unrecognized key 'max_split_sise_mb' in CUDA allocator config. Did you mean 'max_split_size_mb'?");
    expect(messageOf('expandable_segment:True')).to.equal("Unrecognized key 'expandable_segment' in CUDA allocator config. Did you mean 'expandable_segments'?");
    expect(messageOf('frobnicate:1')).to.equal("Unrecognized key 'frobnicate' in CUDA allocator config.");
  });

  it('is an InvalidArgumentError with code INVALID_ARGUMENT, the key and the value', function () {
    const error = thrown(() => parseAllocatorConf('max_split_size_mb:10'));
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect(isStowageError(error, 'INVALID_ARGUMENT')).to.equal(true);
    expect(error.name).to.equal('AllocatorConfError');
    expect(error.key).to.equal('max_split_size_mb');
    expect(error.value).to.equal('10');
    const unknown = thrown(() => parseAllocatorConf('expandable_segments:True,bogus:1'));
    expect(unknown.key).to.equal('bogus');
  });

  it("refuses sizes under 20 MiB with PyTorch's message", function () {
    expect(messageOf('max_split_size_mb:19')).to.equal('CachingAllocator option max_split_size_mb too small, must be >= 20');
    expect(messageOf('max_non_split_rounding_mb:0')).to.equal('CachingAllocator option max_non_split_rounding_mb too small, must be >= 20');
  });

  it("refuses fractions out of range with PyTorch's messages", function () {
    for (const v of ['0', '1', '1.5', '-0.5', 'nan', 'inf']) {
      expect(messageOf(`garbage_collection_threshold:${v}`)).to.equal('garbage_collect_threshold is invalid, set it in (0.0, 1.0)');
    }
    for (const v of ['1.01', '-0.1', 'nan']) {
      expect(messageOf(`per_process_memory_fraction:${v}`)).to.equal('per_process_memory_fraction is invalid, set it in [0.0, 1.0]');
    }
  });

  it("refuses a boolean other than True or False with PyTorch's message and token index", function () {
    expect(messageOf('expandable_segments:true')).to.equal("Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'");
    expect(messageOf('max_split_size_mb:100,release_lock_on_cudamalloc:1')).to.equal("Expected 'True' or 'False' at index 6 in ConfigTokenizer but got '1'");
    for (const key of ['pinned_use_background_threads', 'pinned_use_cuda_host_register', 'graph_capture_record_stream_reuse']) {
      expect(messageOf(`${key}:yes`)).to.equal("Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'");
    }
  });

  it("refuses an unknown backend with PyTorch's message", function () {
    expect(messageOf('backend:hipMallocAsync')).to.equal('Unknown allocator backend, options are native and cudaMallocAsync');
  });

  it("refuses a bad pinned thread count or reserve with PyTorch's messages", function () {
    expect(messageOf('pinned_num_register_threads:3')).to.equal('Number of register threads has to be power of 2, got 3');
    expect(messageOf('pinned_num_register_threads:0')).to.equal('Number of register threads has to be power of 2, got 0');
    expect(messageOf('pinned_num_register_threads:256')).to.equal('Number of register threads should be less than or equal to 128, got 256');
    expect(messageOf('pinned_reserve_segment_size_mb:0')).to.equal('Pinned reserve segment size has to be greater than 0');
  });

  it("refuses bad roundup divisions and intervals with PyTorch's messages", function () {
    expect(messageOf('roundup_power2_divisions:3')).to.equal('For roundups, the divisions has to be power of 2 ');
    expect(messageOf('roundup_power2_divisions:0')).to.equal('For roundups, the divisions has to be power of 2 ');
    expect(messageOf('roundup_power2_divisions:[256:3]')).to.equal('For roundups, the divisions has to be power of 2 or 0 to disable roundup ');
    expect(messageOf('roundup_power2_divisions:[300:2]')).to.equal('For roundups, the intervals have to be power of 2 ');
    expect(messageOf('roundup_power2_divisions:[0:2]')).to.equal('For roundups, the intervals have to be power of 2 ');
    expect(messageOf('roundup_power2_divisions:[300:3]')).to.equal('For roundups, the divisions has to be power of 2 or 0 to disable roundup ', 'the value is checked first');
  });

  it("reports a key without a value as PyTorch's tokenizer does", function () {
    expect(messageOf('max_split_size_mb')).to.equal('Index out of bounds in ConfigTokenizer');
    expect(messageOf('max_split_size_mb:')).to.equal('Index out of bounds in ConfigTokenizer');
    expect(messageOf('expandable_segments:True,backend:')).to.equal('Index out of bounds in ConfigTokenizer');
  });

  it('reports an unclosed list', function () {
    for (const value of ['[', '[256:1', '[256:1,', '[256:', '[256']) {
      expect(messageOf(`roundup_power2_divisions:${value}`)).to.equal("Expected closing bracket ']' in ConfigTokenizer but reached end of config", value);
    }
  });

  it('refuses a missing separator', function () {
    expect(messageOf('max_split_size_mb,100')).to.equal('Error parsing CachingAllocator::AllocatorConfig settings, expected :');
    expect(messageOf('max_split_size_mb:100:200')).to.equal('Error parsing CachingAllocator::AllocatorConfig settings, expected ,');
    expect(messageOf('roundup_power2_divisions:[256,1]')).to.equal('Error parsing CachingAllocator::AllocatorConfig settings, expected :');
    expect(messageOf('roundup_power2_divisions:[256:1:512:2]')).to.equal('Error parsing CachingAllocator::AllocatorConfig settings, expected ,');
    // Whitespace is dropped, so a space is no separator: this reads as 256:1512.
    expect(messageOf('roundup_power2_divisions:[256:1 512:2]')).to.equal('For roundups, the divisions has to be power of 2 or 0 to disable roundup ');
  });

  it('reads a separator where a key belongs as an unknown key, as PyTorch does', function () {
    expect(messageOf(',expandable_segments:True')).to.equal("Unrecognized key ',' in CUDA allocator config.");
    expect(messageOf('expandable_segments:True,,backend:native')).to.equal("Unrecognized key ',' in CUDA allocator config.");
  });

  it('refuses a number with anything but digits in it, where PyTorch would read a prefix of it', function () {
    expect(messageOf('max_split_size_mb:100MB')).to.equal("Error parsing max_split_size_mb: expected a whole number, got '100MB'");
    expect(messageOf('max_split_size_mb:-1')).to.equal("Error parsing max_split_size_mb: expected a whole number, got '-1'");
    expect(messageOf('garbage_collection_threshold:0.5x')).to.equal("Error parsing garbage_collection_threshold: expected a decimal number, got '0.5x'");
    expect(messageOf('max_split_size_mb:18446744073709551616')).to.equal('Error parsing max_split_size_mb: 18446744073709551616 is above 2^64 - 1');
  });
});

describe('readAllocatorConfFromEnv', function () {
  it('gives the defaults when neither variable is set', function () {
    expect(withoutText(readAllocatorConfFromEnv({}))).to.deep.equal(withoutText(parseAllocatorConf('')));
  });

  it('reads PYTORCH_CUDA_ALLOC_CONF', function () {
    expect(readAllocatorConfFromEnv({ PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True' }).expandableSegments).to.equal(true);
  });

  it('prefers PYTORCH_ALLOC_CONF, even when it is empty', function () {
    const env = { PYTORCH_ALLOC_CONF: 'max_split_size_mb:100', PYTORCH_CUDA_ALLOC_CONF: 'max_split_size_mb:200' };
    expect(readAllocatorConfFromEnv(env).maxSplitSizeBytes).to.equal(100 * MiB);
    expect(readAllocatorConfFromEnv({ ...env, PYTORCH_ALLOC_CONF: '' }).maxSplitSizeBytes).to.equal(Number.POSITIVE_INFINITY);
  });

  it('refuses an env that is not an object, or a variable that is not a string, with InvalidArgumentError', function () {
    for (const env of [null, 5, 'PYTORCH_ALLOC_CONF=x']) expect(() => readAllocatorConfFromEnv(env as never), String(env)).to.throw(InvalidArgumentError, /^env must be/);
    expect(() => readAllocatorConfFromEnv({ PYTORCH_ALLOC_CONF: 5 } as never)).to.throw(InvalidArgumentError, /^env\.PYTORCH_ALLOC_CONF must be a configuration string/);
  });

  it('throws for a bad variable', function () {
    expect(thrown(() => readAllocatorConfFromEnv({ PYTORCH_CUDA_ALLOC_CONF: 'nope:1' })).message).to.equal("Unrecognized key 'nope' in CUDA allocator config.");
  });

  it('reads process.env by default', function () {
    const saved = { a: process.env.PYTORCH_ALLOC_CONF, c: process.env.PYTORCH_CUDA_ALLOC_CONF };
    try {
      delete process.env.PYTORCH_ALLOC_CONF;
      process.env.PYTORCH_CUDA_ALLOC_CONF = 'garbage_collection_threshold:0.7';
      expect(readAllocatorConfFromEnv().garbageCollectionThreshold).to.equal(0.7);
    } finally {
      for (const [name, value] of [['PYTORCH_ALLOC_CONF', saved.a], ['PYTORCH_CUDA_ALLOC_CONF', saved.c]] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  });
});

describe('allocatorConfEngineOptions', function () {
  it('maps nothing for an empty string, leaving the engine its preset', function () {
    expect(allocatorConfEngineOptions(parseAllocatorConf(''))).to.deep.equal({});
  });

  it('maps the keys the engine acts on', function () {
    const conf = parseAllocatorConf(
      'max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.6,per_process_memory_fraction:0.5,expandable_segments:False',
    );
    expect(conf.notApplied).to.deep.equal([]);
    expect(allocatorConfEngineOptions(conf)).to.deep.equal({
      maxSplitSize: 64 * MiB,
      roundupPower2Divisions: runs([9, 1], [1, 2], [6, 4]),
      memoryLimit: { fraction: 0.5 },
      garbageCollectionThreshold: 0.6,
      expandableSegments: false,
    });
  });

  it("gives options the engine accepts, and the engine's snapshot shows them", function () {
    const conf = parseAllocatorConf(
      'max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.6,per_process_memory_fraction:0.5,expandable_segments:False',
    );
    const backend = new VirtualMemoryBackend();
    const allocator = new CachingAllocator(backend, allocatorConfEngineOptions(conf));
    try {
      const settings = allocator.snapshot().allocator_settings;
      expect(settings.max_split_size).to.equal(64 * MiB);
      expect(settings.garbage_collection_threshold).to.equal(0.6);
      expect(settings.expandable_segments).to.equal(false);
      expect(settings.memory_limit).to.equal(Math.floor(0.5 * backend.capacityBytes));
      const divisions = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [String(2 ** i), i < 9 ? 1 : i === 9 ? 2 : 4]));
      expect(settings.roundup_power2_divisions).to.deep.equal(divisions);
    } finally {
      allocator.dispose();
    }
  });

  it('turns expandable segments on and maps an unlimited max split to the engine’s unlimited', function () {
    const conf = parseAllocatorConf('expandable_segments:True,max_split_size_mb:18446744073709551615');
    const allocator = new CachingAllocator(new VirtualMemoryBackend(), allocatorConfEngineOptions(conf));
    try {
      const settings = allocator.snapshot().allocator_settings;
      expect(settings.expandable_segments).to.equal(true);
      expect(settings.max_split_size).to.equal(-1);
    } finally {
      allocator.dispose();
    }
  });

  it('lists the given keys the engine does not act on, each with a reason, and maps none of them', function () {
    const conf = parseAllocatorConf(
      'backend:cudaMallocAsync,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:8,' +
        'pinned_use_background_threads:True,pinned_reserve_segment_size_mb:16,graph_capture_record_stream_reuse:True,' +
        'max_non_split_rounding_mb:40,garbage_collection_threshold:0.5,max_split_size_mb:20',
    );
    expect(conf.notApplied.map((n) => n.key)).to.deep.equal([
      'backend',
      'release_lock_on_cudamalloc',
      'pinned_use_cuda_host_register',
      'pinned_num_register_threads',
      'pinned_use_background_threads',
      'pinned_reserve_segment_size_mb',
      'graph_capture_record_stream_reuse',
      'max_non_split_rounding_mb',
      'garbage_collection_threshold',
      'max_split_size_mb',
    ]);
    for (const n of conf.notApplied) expect(n.reason).to.be.a('string').and.not.equal('');
    expect(allocatorConfEngineOptions(conf)).to.deep.equal({});
  });

  it('does not list a key given the value the engine has anyway', function () {
    const conf = parseAllocatorConf('backend:native,release_lock_on_cudamalloc:False,pinned_num_register_threads:1,max_non_split_rounding_mb:20');
    expect(conf.notApplied).to.deep.equal([]);
  });

  it('does not apply a memory fraction of 0', function () {
    const conf = parseAllocatorConf('per_process_memory_fraction:0,garbage_collection_threshold:0.5');
    expect(conf.notApplied.map((n) => n.key)).to.deep.equal(['per_process_memory_fraction', 'garbage_collection_threshold']);
  });
});

describe('formatAllocatorConf', function () {
  it('refuses what is not an AllocatorConf with InvalidArgumentError naming the field, not a TypeError or a wrong string', function () {
    const parsed = parseAllocatorConf('expandable_segments:True,max_split_size_mb:64');
    const refused = (conf: unknown, field: RegExp): void => {
      expect(() => formatAllocatorConf(conf as AllocatorConf), JSON.stringify(conf)).to.throw(InvalidArgumentError, field);
    };
    refused(null, /^conf must be an AllocatorConf/);
    refused({ ...parsed, givenKeys: 'expandable_segments' }, /^conf must be/);
    refused({ ...parsed, givenKeys: ['nope'] }, /^conf must be/);
    refused({ givenKeys: ['max_split_size_mb'] }, /^conf\.maxSplitSizeBytes must be a byte count/);
    refused({ ...parsed, expandableSegments: 'yes' }, /^conf\.expandableSegments must be true or false/);
    refused({ ...parsed, givenKeys: ['garbage_collection_threshold'], garbageCollectionThreshold: 5 }, /parse back/);
    expect(formatAllocatorConf({ ...parsed, expandableSegments: false }), 'a parsed conf with a value changed').to.equal('expandable_segments:False,max_split_size_mb:64');
  });

  it('prints nothing for an empty string', function () {
    expect(formatAllocatorConf(parseAllocatorConf(''))).to.equal('');
  });

  it('prints each given key once, in order, under its CUDA name', function () {
    const conf = parseAllocatorConf(' expandable_segments : True , release_lock_on_hipmalloc:False, max_split_size_mb:100, expandable_segments:False');
    expect(formatAllocatorConf(conf)).to.equal('expandable_segments:False,release_lock_on_cudamalloc:False,max_split_size_mb:100');
  });

  it('prints divisions in the short list form, or as one number when every interval has the same', function () {
    const format = (value: string): string => formatAllocatorConf(parseAllocatorConf(`roundup_power2_divisions:${value}`));
    expect(format('[256:1,512:2,>:4]')).to.equal('roundup_power2_divisions:[256:1,512:2,>:4]');
    expect(format('[64:8,256:4,1024:4,>:1]')).to.equal('roundup_power2_divisions:[64:8,128:0,256:4,512:0,1024:4,>:1]');
    expect(format('4')).to.equal('roundup_power2_divisions:4');
    expect(format('[]')).to.equal('roundup_power2_divisions:[]');
    expect(format('[>:4]')).to.equal('roundup_power2_divisions:[1:0,>:4]');
  });

  it('prints any valid string back so that it parses to the same conf', function () {
    const pow2 = (max: number): fc.Arbitrary<string> => fc.integer({ min: 0, max }).map((e) => (2n ** BigInt(e)).toString());
    const bool = fc.constantFrom('True', 'False');
    const size = fc.oneof(fc.integer({ min: 20, max: 1 << 20 }).map(String), fc.bigInt({ min: 20n, max: 2n ** 64n - 1n }).map(String));
    const listEntry = fc.tuple(fc.oneof(pow2(20), fc.constant('>')), fc.oneof(fc.constant('0'), pow2(10))).map(([b, n]) => `${b}:${n}`);
    const value: Record<string, fc.Arbitrary<string>> = {
      max_split_size_mb: size,
      max_non_split_rounding_mb: size,
      garbage_collection_threshold: fc.double({ min: Number.MIN_VALUE, max: 1, maxExcluded: true, noNaN: true }).map(String),
      per_process_memory_fraction: fc.double({ min: 0, max: 1, noNaN: true }).map(String),
      roundup_power2_divisions: fc.oneof(pow2(20), fc.array(listEntry, { maxLength: 6 }).map((e) => `[${e.join(',')}]`)),
      expandable_segments: bool,
      pinned_use_background_threads: bool,
      backend: fc.constantFrom('native', 'cudaMallocAsync'),
      release_lock_on_cudamalloc: bool,
      release_lock_on_hipmalloc: bool,
      pinned_use_cuda_host_register: bool,
      pinned_use_hip_host_register: bool,
      pinned_num_register_threads: pow2(7),
      pinned_reserve_segment_size_mb: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }).map(String),
      graph_capture_record_stream_reuse: bool,
    };
    const pair = fc.constantFrom(...Object.keys(value)).chain((key) => value[key]!.map((v) => `${key}:${v}`));
    const text = fc.tuple(fc.array(pair, { maxLength: 12 }), fc.constantFrom(',', ', ', ' , ')).map(([pairs, sep]) => pairs.join(sep));
    fc.assert(
      fc.property(text, (t) => {
        const conf = parseAllocatorConf(t);
        const printed = formatAllocatorConf(conf);
        const again = parseAllocatorConf(printed);
        expect(withoutText(again)).to.deep.equal(withoutText(conf));
        expect(formatAllocatorConf(again)).to.equal(printed);
      }),
      { numRuns: 500 },
    );
    expect(Object.keys(value).filter((k) => !k.includes('hip'))).to.have.members([...ALLOCATOR_CONF_KEYS]);
  });
});
