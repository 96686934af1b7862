/** The characters that are tokens by themselves: the key/value, pair and list separators. */
const SEPARATORS = new Set([',', ':', '[', ']']);
/** What C's `isspace` accepts in the "C" locale: PyTorch drops these anywhere in the string, even inside a word. */
const WHITESPACE = new Set([' ', '\t', '\n', '\v', '\f', '\r']);

/**
 * Splits a configuration string into tokens as PyTorch's `ConfigTokenizer` does: each of `, : [ ]` is a token of
 * its own, the runs of other characters between them are the words, and whitespace is dropped everywhere (so
 * `max split` reads as `maxsplit`). `'a:1, b:[2,3]'` gives `a : 1 , b : [ 2 , 3 ]`. Token indices are the ones
 * PyTorch's messages report ("at index 2 in ConfigTokenizer").
 */
export function tokenizeAllocatorConf(text: string): string[] {
  const tokens: string[] = [];
  let word = '';
  for (const ch of text) {
    if (SEPARATORS.has(ch)) {
      if (word !== '') tokens.push(word);
      word = '';
      tokens.push(ch);
    } else if (!WHITESPACE.has(ch)) {
      word += ch;
    }
  }
  if (word !== '') tokens.push(word);
  return tokens;
}
