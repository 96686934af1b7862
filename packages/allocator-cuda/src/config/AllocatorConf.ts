/**
 * Parsing `PYTORCH_CUDA_ALLOC_CONF`, as PyTorch's c10 does (CUDAAllocatorConfig.cpp and, for the keys every
 * accelerator shares, c10/core/AllocatorConfig.cpp):
 * - The string is tokenized by tokenizeAllocatorConf: `, : [ ]` are tokens, whitespace is dropped.
 * - Pairs are `key:value`, separated by `,`; a trailing `,` is accepted. A later pair overrides an earlier one.
 * - Values are `True`/`False`, whole numbers (sizes in MiB, "mb"), decimal fractions, or for
 *   roundup_power2_divisions a list `[boundary:divisions, ..., >:divisions]` (Note [roundup_power2_divisions]).
 * - Each value is checked as PyTorch checks it, and a fault throws AllocatorConfError with PyTorch's message.
 * - The result is a frozen AllocatorConf holding every key's value (PyTorch's default where the key is absent),
 *   the keys given, the string itself, and the given keys the caching engine does not act on (`notApplied`).
 *
 * Note [PyTorch's messages]
 * The messages, keys and defaults follow pytorch/pytorch at commit b944315b93d36f842ef94d67a041371993234a74
 * (c10/cuda/CUDAAllocatorConfig.cpp) and 0ac716637f3258efcaf7fdfb851bdd520c9c1441 (c10/core/AllocatorConfig.cpp,
 * with ConfigTokenizer in c10/core/AllocatorConfig.h), read in November 2026. Messages are PyTorch's text without
 * the C++ location PyTorch appends. Where PyTorch is more lenient this parser refuses, with a message of its own:
 * - PyTorch reads numbers with `stoull`/`stod`, which take a prefix (`100MB` reads as 100, `-1` wraps to 2^64 - 1)
 *   and throw `std::invalid_argument` ("stoull") for no digits at all; here a value must be a whole number (or a
 *   decimal fraction) entirely: "Error parsing max_split_size_mb: expected a whole number, got '100MB'".
 * - PyTorch's parsers ignore the result of `checkToken(':')` and `checkToken(',')` (so `max_split_size_mb,100`
 *   passes); here a missing separator throws the message PyTorch used before ConfigTokenizer: "Error parsing
 *   CachingAllocator::AllocatorConfig settings, expected :" (or `,`).
 * - A list left open reports "Expected closing bracket ']' ..." wherever the string ends (PyTorch reports "Index
 *   out of bounds in ConfigTokenizer" when it ends right after a value inside the list).
 * An unknown key gets PyTorch's sentence, then " Did you mean '<key>'?" when one key is near.
 */
import { InvalidArgumentError } from '@stowage/core';
import { nearestName } from '@stowage/core/plugin-kit';
import type { AllocatorConf, AllocatorConfValues } from './AllocatorConfValues.js';
import { notAppliedKeys } from './allocatorConfEngineOptions.js';
import type { AllocatorConfKey } from './AllocatorConfKey.js';
import { ALLOCATOR_CONF_KEYS } from './AllocatorConfKey.js';
import { AllocatorConfError } from './AllocatorConfError.js';
import { tokenizeAllocatorConf } from './tokenizeAllocatorConf.js';

const MiB = 2 ** 20;
/** PyTorch's `kLargeBuffer` in MiB: the least max_split_size_mb and max_non_split_rounding_mb. */
const MIN_SPLIT_SIZE_MB = 20n;
/** `SIZE_MAX / kMB`: PyTorch clamps a larger size in MiB to this (which is unlimited in practice). */
const MAX_SIZE_MB = (2n ** 64n - 1n) / BigInt(MiB);
const UINT64_MAX = 2n ** 64n - 1n;
/** PyTorch's `pinned_max_register_threads()`. */
const MAX_REGISTER_THREADS = 128n;
/** Size intervals of roundup_power2_divisions: [0, 2) MiB, [2, 4) MiB, ... [32, ∞) GiB. */
export const ROUNDUP_POWER2_INTERVALS = 16;

/** PyTorch's defaults: what an empty string parses to. */
export const DEFAULT_ALLOCATOR_CONF_VALUES: AllocatorConfValues = Object.freeze({
  maxSplitSizeBytes: Number.POSITIVE_INFINITY,
  maxNonSplitRoundingBytes: 20 * MiB,
  garbageCollectionThreshold: 0,
  roundupPower2Divisions: Object.freeze(new Array<number>(ROUNDUP_POWER2_INTERVALS).fill(0)),
  expandableSegments: false,
  pinnedUseBackgroundThreads: false,
  backend: 'native',
  releaseLockOnCudaMalloc: false,
  pinnedUseCudaHostRegister: false,
  pinnedNumRegisterThreads: 1,
  pinnedReserveSegmentSizeMb: 0,
  graphCaptureRecordStreamReuse: false,
  perProcessMemoryFraction: 1,
});

/** The ROCm spellings PyTorch accepts for two CUDA keys. */
const ALIASES: Readonly<Record<string, AllocatorConfKey>> = {
  release_lock_on_hipmalloc: 'release_lock_on_cudamalloc',
  pinned_use_hip_host_register: 'pinned_use_cuda_host_register',
};

/** The values while a string is parsed. */
type Draft = Omit<{ -readonly [K in keyof AllocatorConfValues]: AllocatorConfValues[K] }, 'roundupPower2Divisions'> & { roundupPower2Divisions: number[] };

/**
 * Parses a `PYTORCH_CUDA_ALLOC_CONF`-style string (module comment above). The empty string gives PyTorch's defaults.
 * @throws AllocatorConfError with PyTorch's message for an unknown key, a bad value, a missing value or separator,
 * or an unclosed list; InvalidArgumentError for something that is not a string
 */
export function parseAllocatorConf(text: string): AllocatorConf {
  if (typeof text !== 'string') throw new InvalidArgumentError('text', text, "a PYTORCH_CUDA_ALLOC_CONF string such as 'expandable_segments:True' ('' for PyTorch's defaults)");
  const tokens = tokenizeAllocatorConf(text);
  const values: Draft = { ...DEFAULT_ALLOCATOR_CONF_VALUES, roundupPower2Divisions: [...DEFAULT_ALLOCATOR_CONF_VALUES.roundupPower2Divisions] };
  const given: AllocatorConfKey[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const written = tokens[i]!;
    const key = ALIASES[written] ?? (ALLOCATOR_CONF_KEYS.includes(written as AllocatorConfKey) ? (written as AllocatorConfKey) : undefined);
    if (key === undefined) {
      const near = nearestName(written.toLowerCase(), ALLOCATOR_CONF_KEYS, 3);
      const hint = near === undefined ? '' : ` Did you mean '${near}'?`;
      throw new AllocatorConfError(written, written, `Unrecognized key '${written}' in CUDA allocator config.${hint}`);
    }
    expectSeparator(tokens, ++i, ':', written);
    i = parseValue(tokens, i + 1, key, written, values);
    if (!given.includes(key)) given.push(key);
    if (i + 1 < tokens.length) expectSeparator(tokens, ++i, ',', written);
  }
  const divisions = Object.freeze(values.roundupPower2Divisions);
  const frozenValues: AllocatorConfValues = { ...values, roundupPower2Divisions: divisions };
  return Object.freeze({
    ...frozenValues,
    givenKeys: Object.freeze(given),
    notApplied: Object.freeze(notAppliedKeys(frozenValues, given).map((n) => Object.freeze(n))),
    text,
  });
}

/** Parses the value of `key` starting at token `i` into `values`; returns the index of its last token. */
function parseValue(tokens: readonly string[], i: number, key: AllocatorConfKey, written: string, values: Draft): number {
  const token = valueToken(tokens, i, written);
  switch (key) {
    case 'max_split_size_mb':
      values.maxSplitSizeBytes = sizeMbToBytes(token, written);
      return i;
    case 'max_non_split_rounding_mb':
      values.maxNonSplitRoundingBytes = sizeMbToBytes(token, written);
      return i;
    case 'garbage_collection_threshold': {
      const fraction = decimal(token, written);
      if (!(fraction > 0 && fraction < 1)) throw new AllocatorConfError(written, token, 'garbage_collect_threshold is invalid, set it in (0.0, 1.0)');
      values.garbageCollectionThreshold = fraction;
      return i;
    }
    case 'per_process_memory_fraction': {
      const fraction = decimal(token, written);
      if (!(fraction >= 0 && fraction <= 1)) throw new AllocatorConfError(written, token, 'per_process_memory_fraction is invalid, set it in [0.0, 1.0]');
      values.perProcessMemoryFraction = fraction;
      return i;
    }
    case 'roundup_power2_divisions':
      return parseRoundupPower2Divisions(tokens, i, written, values.roundupPower2Divisions);
    case 'expandable_segments':
      values.expandableSegments = trueOrFalse(token, i, written);
      return i;
    case 'pinned_use_background_threads':
      values.pinnedUseBackgroundThreads = trueOrFalse(token, i, written);
      return i;
    case 'release_lock_on_cudamalloc':
      values.releaseLockOnCudaMalloc = trueOrFalse(token, i, written);
      return i;
    case 'pinned_use_cuda_host_register':
      values.pinnedUseCudaHostRegister = trueOrFalse(token, i, written);
      return i;
    case 'graph_capture_record_stream_reuse':
      values.graphCaptureRecordStreamReuse = trueOrFalse(token, i, written);
      return i;
    case 'backend':
      if (token !== 'native' && token !== 'cudaMallocAsync') {
        throw new AllocatorConfError(written, token, 'Unknown allocator backend, options are native and cudaMallocAsync');
      }
      values.backend = token;
      return i;
    case 'pinned_num_register_threads': {
      const threads = wholeNumber(token, written);
      if (!isPowerOfTwo(threads)) throw new AllocatorConfError(written, token, `Number of register threads has to be power of 2, got ${threads}`);
      if (threads > MAX_REGISTER_THREADS) {
        throw new AllocatorConfError(written, token, `Number of register threads should be less than or equal to ${MAX_REGISTER_THREADS}, got ${threads}`);
      }
      values.pinnedNumRegisterThreads = Number(threads);
      return i;
    }
    case 'pinned_reserve_segment_size_mb': {
      const mb = wholeNumber(token, written);
      if (mb <= 0n) throw new AllocatorConfError(written, token, 'Pinned reserve segment size has to be greater than 0');
      if (mb > BigInt(Number.MAX_SAFE_INTEGER)) throw new AllocatorConfError(written, token, `Error parsing ${written}: ${token} is above 2^53 - 1`);
      values.pinnedReserveSegmentSizeMb = Number(mb);
      return i;
    }
  }
}

/*
 * Note [roundup_power2_divisions]
 * Two forms, expanded into 16 per-interval values as PyTorch expands them:
 * - `roundup_power2_divisions:N`: N (a power of two; 0 is refused here, unlike in a list) for every interval.
 * - `roundup_power2_divisions:[b1:n1, b2:n2, ..., >:n]`: each boundary b is a power of two in MiB naming the interval
 *   [b, 2b) MiB, index log2(b) clamped to 15 (`1` is index 0, which also covers everything under 1 MiB). Each n is
 *   0 or a power of two. The first boundary's n also fills every interval below it; `>:n` fills every interval
 *   above the last boundary given before it (all but index 0 when it comes first). Intervals named by no entry keep
 *   0. So `[256:1,512:2,>:4]` is 1 for indices 0-8, 2 for index 9 and 4 for indices 10-15. Each n is checked before
 *   its boundary.
 */
function parseRoundupPower2Divisions(tokens: readonly string[], i: number, written: string, divisions: number[]): number {
  const first = tokens[i]!;
  if (first !== '[') {
    const n = wholeNumber(first, written);
    if (!isPowerOfTwo(n)) throw new AllocatorConfError(written, first, 'For roundups, the divisions has to be power of 2 ');
    divisions.fill(Number(n));
    return i;
  }
  const unclosed = (): AllocatorConfError => new AllocatorConfError(written, undefined, "Expected closing bracket ']' in ConfigTokenizer but reached end of config");
  let lastIndex = 0;
  let firstEntry = true;
  for (i++; ; i++) {
    if (i >= tokens.length) throw unclosed();
    if (tokens[i] === ']') return i;
    const boundary = tokens[i]!;
    if (i + 2 >= tokens.length) throw unclosed();
    expectSeparator(tokens, i + 1, ':', written);
    const valueText = tokens[(i += 2)]!;
    const n = wholeNumber(valueText, written);
    if (n !== 0n && !isPowerOfTwo(n)) throw new AllocatorConfError(written, valueText, 'For roundups, the divisions has to be power of 2 or 0 to disable roundup ');
    if (boundary === '>') {
      divisions.fill(Number(n), lastIndex + 1);
    } else {
      const mb = wholeNumber(boundary, written);
      if (!isPowerOfTwo(mb)) throw new AllocatorConfError(written, boundary, 'For roundups, the intervals have to be power of 2 ');
      const index = Math.min(mb.toString(2).length - 1, ROUNDUP_POWER2_INTERVALS - 1);
      if (firstEntry) divisions.fill(Number(n), 0, index);
      firstEntry = false;
      divisions[index] = Number(n);
      lastIndex = index;
    }
    if (i + 1 >= tokens.length) throw unclosed();
    if (tokens[i + 1] !== ']') expectSeparator(tokens, ++i, ',', written);
  }
}

/** The token at `i`, which must exist: a key at the end of the string has no value. */
function valueToken(tokens: readonly string[], i: number, written: string): string {
  const token = tokens[i];
  if (token === undefined) throw new AllocatorConfError(written, undefined, 'Index out of bounds in ConfigTokenizer');
  return token;
}

function expectSeparator(tokens: readonly string[], i: number, separator: ',' | ':', written: string): void {
  const token = tokens[i];
  if (token === undefined && separator === ':') throw new AllocatorConfError(written, undefined, 'Index out of bounds in ConfigTokenizer');
  if (token !== separator) throw new AllocatorConfError(written, token, `Error parsing CachingAllocator::AllocatorConfig settings, expected ${separator}`);
}

function trueOrFalse(token: string, i: number, written: string): boolean {
  if (token === 'True') return true;
  if (token === 'False') return false;
  throw new AllocatorConfError(written, token, `Expected 'True' or 'False' at index ${i} in ConfigTokenizer but got '${token}'`);
}

/** A whole number in [0, 2^64 - 1], every character a digit (module comment: stricter than `stoull`). */
function wholeNumber(token: string, written: string): bigint {
  if (!/^\d+$/.test(token)) throw new AllocatorConfError(written, token, `Error parsing ${written}: expected a whole number, got '${token}'`);
  const n = BigInt(token);
  if (n > UINT64_MAX) throw new AllocatorConfError(written, token, `Error parsing ${written}: ${token} is above 2^64 - 1`);
  return n;
}

/** A decimal number as `stod` reads one entirely (`0.5`, `.5`, `5e-1`, `inf`, `nan`). */
function decimal(token: string, written: string): number {
  if (/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(token)) return Number(token);
  if (/^[+-]?(inf|infinity)$/i.test(token)) return token.startsWith('-') ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  if (/^[+-]?nan$/i.test(token)) return Number.NaN;
  throw new AllocatorConfError(written, token, `Error parsing ${written}: expected a decimal number, got '${token}'`);
}

/** A size in MiB of at least 20, as bytes: PyTorch clamps it to SIZE_MAX / 1 MiB; beyond 2^53 - 1 bytes it is Infinity. */
function sizeMbToBytes(token: string, written: string): number {
  const mb = wholeNumber(token, written);
  if (mb < MIN_SPLIT_SIZE_MB) throw new AllocatorConfError(written, token, `CachingAllocator option ${written} too small, must be >= ${MIN_SPLIT_SIZE_MB}`);
  const bytes = (mb < MAX_SIZE_MB ? mb : MAX_SIZE_MB) * BigInt(MiB);
  return bytes > BigInt(Number.MAX_SAFE_INTEGER) ? Number.POSITIVE_INFINITY : Number(bytes);
}

function isPowerOfTwo(n: bigint): boolean {
  return n > 0n && (n & (n - 1n)) === 0n;
}

/**
 * Prints `conf` back as a configuration string that parses to the same values and given keys: each given key once,
 * in order, under its CUDA name; roundup_power2_divisions as a single power of two when every interval has the same
 * one, else as a list `[b:n, ..., >:n]` (`[256:1,512:2,>:4]`). An unlimited size prints as
 * 9007199254740991 MiB (which parses back to unlimited).
 * @throws InvalidArgumentError, naming the field, for something that is not an AllocatorConf (from
 * `parseAllocatorConf`, or one with values changed): givenKeys not a list of keys, a given key's value of the wrong
 * type, or values that do not parse back (a threshold out of range)
 */
export function formatAllocatorConf(conf: AllocatorConf): string {
  const c = conf as unknown as Partial<Record<string, unknown>> | null;
  if (typeof c !== 'object' || c === null || !Array.isArray(c.givenKeys) || !c.givenKeys.every((key) => (ALLOCATOR_CONF_KEYS as readonly unknown[]).includes(key))) {
    throw new InvalidArgumentError('conf', conf, `an AllocatorConf from parseAllocatorConf (givenKeys a list of ${ALLOCATOR_CONF_KEYS.join(', ')})`);
  }
  const text = conf.givenKeys.map((key) => `${key}:${formatValue(conf, key)}`).join(',');
  try {
    parseAllocatorConf(text);
  } catch (error) {
    if (!(error instanceof AllocatorConfError)) throw error;
    throw new InvalidArgumentError('conf', conf, `an AllocatorConf whose values parse back (${error.message})`, { cause: error });
  }
  return text;
}

function formatValue(conf: AllocatorConfValues, key: AllocatorConfKey): string {
  const field = <T>(name: keyof AllocatorConfValues, ok: (v: unknown) => boolean, what: string): T => {
    const value = conf[name];
    if (!ok(value)) throw new InvalidArgumentError(`conf.${name}`, value, `${what} (the value of ${key})`);
    return value as T;
  };
  const isNumber = (v: unknown): boolean => typeof v === 'number' && !Number.isNaN(v);
  const mb = (name: keyof AllocatorConfValues): string => {
    const bytes = field<number>(name, (v) => isNumber(v) && (v as number) >= 0, 'a byte count ≥ 0, or Infinity');
    return String(Number.isFinite(bytes) ? bytes / MiB : Number.MAX_SAFE_INTEGER);
  };
  const num = (name: keyof AllocatorConfValues): string => String(field<number>(name, (v) => isNumber(v) && Number.isFinite(v), 'a finite number'));
  const bool = (name: keyof AllocatorConfValues): string => (field<boolean>(name, (v) => typeof v === 'boolean', 'true or false') ? 'True' : 'False');
  switch (key) {
    case 'max_split_size_mb':
      return mb('maxSplitSizeBytes');
    case 'max_non_split_rounding_mb':
      return mb('maxNonSplitRoundingBytes');
    case 'garbage_collection_threshold':
      return num('garbageCollectionThreshold');
    case 'per_process_memory_fraction':
      return num('perProcessMemoryFraction');
    case 'roundup_power2_divisions':
      return formatDivisions(field<readonly number[]>('roundupPower2Divisions', (v) => Array.isArray(v) && v.length > 0 && v.every((n) => Number.isSafeInteger(n) && n >= 0), 'a non-empty list of integers ≥ 0'));
    case 'expandable_segments':
      return bool('expandableSegments');
    case 'pinned_use_background_threads':
      return bool('pinnedUseBackgroundThreads');
    case 'release_lock_on_cudamalloc':
      return bool('releaseLockOnCudaMalloc');
    case 'pinned_use_cuda_host_register':
      return bool('pinnedUseCudaHostRegister');
    case 'graph_capture_record_stream_reuse':
      return bool('graphCaptureRecordStreamReuse');
    case 'backend':
      return field<string>('backend', (v) => v === 'native' || v === 'cudaMallocAsync', "'native' or 'cudaMallocAsync'");
    case 'pinned_num_register_threads':
      return num('pinnedNumRegisterThreads');
    case 'pinned_reserve_segment_size_mb':
      return num('pinnedReserveSegmentSizeMb');
  }
}

function formatDivisions(divisions: readonly number[]): string {
  const last = divisions[divisions.length - 1]!;
  let runStart = divisions.length - 1;
  while (runStart > 0 && divisions[runStart - 1] === last) runStart--;
  if (runStart === 0) return last > 0 ? BigInt(last).toString() : '[]';
  // The first entry also fills the intervals below it, `>` every interval above the last entry
  // (Note [roundup_power2_divisions]); the entries between name their intervals one by one.
  let firstEnd = 0;
  while (firstEnd + 1 < runStart && divisions[firstEnd + 1] === divisions[0]) firstEnd++;
  const entries: string[] = [];
  for (let index = firstEnd; index < runStart; index++) entries.push(`${2 ** index}:${BigInt(divisions[index]!)}`);
  entries.push(`>:${BigInt(last)}`);
  return `[${entries.join(',')}]`;
}

/**
 * The variables read, first set first: PYTORCH_ALLOC_CONF, PyTorch's primary variable since c10/core/AllocatorConfig
 * (which warns that the other is deprecated), then PYTORCH_CUDA_ALLOC_CONF. A variable set to '' counts as set.
 */
export const ALLOCATOR_CONF_VARIABLES = Object.freeze(['PYTORCH_ALLOC_CONF', 'PYTORCH_CUDA_ALLOC_CONF'] as const);

/**
 * Parses the first of {@link ALLOCATOR_CONF_VARIABLES} that `env` sets; PyTorch's defaults when neither is set.
 * @throws AllocatorConfError as {@link parseAllocatorConf}; InvalidArgumentError for an `env` that is not an object,
 * or a variable whose value is not a string
 */
export function readAllocatorConfFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): AllocatorConf {
  if (typeof env !== 'object' || env === null) throw new InvalidArgumentError('env', env, 'an environment object such as process.env (or nothing)');
  for (const name of ALLOCATOR_CONF_VARIABLES) {
    const text = env[name];
    if (text !== undefined && typeof text !== 'string') throw new InvalidArgumentError(`env.${name}`, text, "a configuration string such as 'expandable_segments:True'");
    if (text !== undefined) return parseAllocatorConf(text);
  }
  return parseAllocatorConf('');
}
