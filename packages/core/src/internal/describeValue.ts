/** Renders an argument for an error message: numbers exactly, strings quoted, objects by kind. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || value === undefined || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return value.length <= 8 ? `[${value.map(describeValue).join(', ')}]` : `an array of length ${value.length}`;
  if (typeof value === 'function') return 'a function';
  const name = (value as object).constructor?.name;
  return name ? `a ${name}` : 'an object';
}
