import { describe, expect, it } from 'vitest';
import { diffLines, diffModel, hunks, MAX_DIFF_LINES, relativePath, splitLines } from '../src/protocol/diff';

describe('the diff rendering model', () => {
  it('shows a one-line change as a hunk with its header and counts', () => {
    const m = diffModel({ type: 'diff', path: '/ws/hello.py', oldText: "print('hello')\n", newText: "print('goodbye')\n" }, '/ws');
    expect(m).toMatchObject({ displayPath: 'hello.py', isNew: false, added: 1, removed: 1 });
    expect(m.hunks).toEqual([{ header: '@@ -1,1 +1,1 @@', lines: [{ op: '-', text: "print('hello')" }, { op: '+', text: "print('goodbye')" }] }]);
  });

  it('keeps three lines of context and splits far-apart changes into hunks', () => {
    const a = Array.from({ length: 20 }, (_, i) => `line ${i}`);
    const b = [...a];
    b[2] = 'changed 2';
    b[15] = 'changed 15';
    const found = hunks(diffLines(a, b));
    expect(found.map((h) => h.header)).toEqual(['@@ -1,6 +1,6 @@', '@@ -13,7 +13,7 @@']);
    expect(found[0].lines.filter((l) => l.op === ' ')).toHaveLength(5); // lines 0-1 before, 3-5 after
  });

  it('finds insertions in the middle by LCS', () => {
    const ops = diffLines(['a', 'b', 'c'], ['a', 'x', 'b', 'c']);
    expect(ops).toEqual([{ op: ' ', text: 'a' }, { op: '+', text: 'x' }, { op: ' ', text: 'b' }, { op: ' ', text: 'c' }]);
    expect(hunks(ops)[0].header).toBe('@@ -1,3 +1,4 @@');
  });

  it('marks new files and counts their lines as added', () => {
    const m = diffModel({ type: 'diff', path: '/ws/new.py', oldText: null, newText: 'a\nb\n' }, '/ws');
    expect(m).toMatchObject({ isNew: true, added: 2, removed: 0 });
    expect(m.hunks[0].header).toBe('@@ -0,0 +1,2 @@');
  });

  it('has no hunks for identical text, and summarizes huge files instead of diffing them', () => {
    expect(diffModel({ type: 'diff', path: 'a', oldText: 'x\n', newText: 'x\n' }).hunks).toEqual([]);
    const big = 'x\n'.repeat(MAX_DIFF_LINES + 1);
    const m = diffModel({ type: 'diff', path: 'a', oldText: big, newText: '' });
    expect(m.tooLarge).toEqual({ oldLines: MAX_DIFF_LINES + 1, newLines: 0 });
    expect(m.hunks).toEqual([]);
  });

  it('splits lines without a phantom last line, and shows paths relative to the root only inside it', () => {
    expect(splitLines('a\nb\n')).toEqual(['a', 'b']);
    expect(splitLines('a\nb')).toEqual(['a', 'b']);
    expect(splitLines(null)).toEqual([]);
    expect(relativePath('/ws/src/a.py', '/ws/')).toBe('src/a.py');
    expect(relativePath('/wsx/a.py', '/ws')).toBe('/wsx/a.py');
    expect(relativePath('C:\\ws\\a.py', 'C:\\ws')).toBe('a.py');
  });
});
