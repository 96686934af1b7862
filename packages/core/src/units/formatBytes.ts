import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'] as const;

/**
 * Formats a byte count in binary units with two decimals: `formatBytes(3 * 2 ** 20) === '3.00 MiB'`. Whole counts
 * under 1 KiB print as integers (`'1023 B'`). A negative number is a difference of byte counts and prints as one,
 * with its sign (`'-1.50 KiB'`); a fraction (a mean) prints with two decimals (`'0.50 B'`).
 *
 * Note [Formatting bad byte counts]: error messages (OutOfMemoryError's among them) format figures that user code
 * supplied, such as a core's `capacityBytes`, so formatBytes never throws for a number: throwing would replace
 * the error being reported. NaN and ±Infinity print as they are, in bytes and unscaled (`'NaN B'`,
 * `'Infinity B'`, never `'Infinity PiB'`), so that the bad figure stays visible in the message that quotes it.
 * @throws InvalidArgumentError for a value that is not a number
 */
export function formatBytes(bytes: number): string {
  if (typeof bytes !== 'number') throw new InvalidArgumentError('bytes', bytes, 'a number of bytes');
  if (!Number.isFinite(bytes)) return `${bytes} B`;
  const sign = bytes < 0 ? '-' : '';
  let value = Math.abs(bytes);
  let unit = 0;
  // Compare what will be printed, so that 1023.999 KiB carries over as 1.00 MiB.
  while (unit < UNITS.length - 1 && Number(value.toFixed(2)) >= 1024) {
    value /= 1024;
    unit++;
  }
  if (unit === 0 && Number.isInteger(value)) return `${sign}${value} B`;
  return `${sign}${value.toFixed(2)} ${UNITS[unit]}`;
}

/**
 * Parses a byte count written as a number or as `'512MiB'`, `'1.5 GiB'`, `'64KB'` (KB, MB, GB are decimal;
 * KiB, MiB, GiB binary). Returns undefined when the value is not a size (text that is not one, or anything but a
 * number or a string); callers turn that into a typed error.
 */
export function parseBytes(value: number | string): number | undefined {
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  if (typeof value !== 'string') return undefined;
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?\s*$/i.exec(value);
  if (!match) return undefined;
  const unit = (match[2] ?? 'B').toUpperCase();
  const scale: Record<string, number> = {
    B: 1, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12, PB: 1e15,
    KIB: 2 ** 10, MIB: 2 ** 20, GIB: 2 ** 30, TIB: 2 ** 40, PIB: 2 ** 50,
  };
  const exact = Number(match[1]) * scale[unit]!;
  const bytes = Math.round(exact);
  // A fraction of a byte is not a size ('1.5', '0.4 B'); '1.1 KB' computes to 1100.0000000000002 and is one.
  if (Math.abs(exact - bytes) > 1e-9 * Math.max(1, exact)) return undefined;
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}
