const MAX_KEYS = 4;
const MAX_STRING = 40;

/**
 * Renders a received value for an error message, shortly: numbers exactly, strings quoted (cut at 40 characters),
 * arrays and plain objects by their first elements or keys, other objects by their class with the right article.
 */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > MAX_STRING ? `${value.slice(0, MAX_STRING)}…` : value);
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol') return value.toString();
  if (value === null || value === undefined || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return value.length <= 8 ? `[${value.map(describeShort).join(', ')}]` : `an array of length ${value.length}`;
  if (typeof value === 'function') return value.name ? `the function ${value.name}` : 'a function';
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto === Object.prototype || proto === null) {
    const keys = Object.keys(value);
    if (keys.length === 0) return '{}';
    const shown = keys.slice(0, MAX_KEYS).map((k) => `${k}: ${describeShort((value as Record<string, unknown>)[k])}`);
    return `{ ${shown.join(', ')}${keys.length > MAX_KEYS ? ', …' : ''} }`;
  }
  const name = (value as object).constructor?.name;
  return name ? `${/^[AEIOU]/i.test(name) ? 'an' : 'a'} ${name}` : 'an object';
}

/** One level only: nested objects and arrays by kind. */
function describeShort(value: unknown): string {
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'an object';
  return describeValue(value);
}
