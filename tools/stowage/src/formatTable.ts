/**
 * Rows of cells as a plain-text table: columns padded to their widest cell, the first column left-aligned and the
 * others right-aligned (they hold figures), a rule under the header row.
 */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, c) => Math.max(...all.map((r) => (r[c] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    widths
      .map((w, c) => (c === 0 ? (cells[c] ?? '').padEnd(w) : (cells[c] ?? '').padStart(w)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
