/* The diff rendering model: what the chat view shows for an ACP `diff` tool-call content item
 * (a permission question's proposed edit, or a finished edit): unified-diff hunks with context,
 * counts of added and removed lines, the path shown relative to the workspace.
 *
 *   const model = diffModel({type: 'diff', path: '/ws/a.py', oldText, newText}, '/ws');
 *   model.hunks[0].header   // "@@ -1,3 +1,3 @@"
 *
 * Line diff by LCS over what lies between the common prefix and suffix; when that middle is too
 * large to tabulate, it is shown as all removed then all added. No `vscode` import.
 */

import type { DiffContent } from './types';

export const MAX_DIFF_LINES = 4000;
const MAX_DIFF_CELLS = 4_000_000;
const CONTEXT = 3;

export type DiffOp = ' ' | '-' | '+';

export interface DiffLine {
  op: DiffOp;
  text: string;
}

export interface DiffHunk {
  header: string;
  lines: DiffLine[];
}

export interface DiffModel {
  path: string;
  /** `path` relative to the workspace root when inside it. */
  displayPath: string;
  isNew: boolean;
  added: number;
  removed: number;
  hunks: DiffHunk[];
  /** Set when either side has more than MAX_DIFF_LINES lines: no hunks are computed. */
  tooLarge?: { oldLines: number; newLines: number };
}

export function splitLines(text: string | null | undefined): string[] {
  if (!text) return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The edit script turning lines `a` into lines `b`. */
export function diffLines(a: string[], b: string[]): DiffLine[] {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const ops: DiffLine[] = a.slice(0, start).map((text) => ({ op: ' ', text }));
  ops.push(...middle(a.slice(start, endA), b.slice(start, endB)));
  ops.push(...a.slice(endA).map((text): DiffLine => ({ op: ' ', text })));
  return ops;
}

function middle(a: string[], b: string[]): DiffLine[] {
  const n = a.length;
  const m = b.length;
  const removed = a.map((text): DiffLine => ({ op: '-', text }));
  const added = b.map((text): DiffLine => ({ op: '+', text }));
  if (n === 0 || m === 0 || n * m > MAX_DIFF_CELLS) return [...removed, ...added];
  const w = m + 1;
  const dp = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      dp[i * w + j] = a[i] === b[j] ? dp[(i + 1) * w + j + 1] + 1 : Math.max(dp[(i + 1) * w + j], dp[i * w + j + 1]);
    }
  }
  const ops: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      ops.push({ op: ' ', text: a[i] });
      i++;
      j++;
    } else if (dp[(i + 1) * w + j] >= dp[i * w + j + 1]) {
      ops.push({ op: '-', text: a[i++] });
    } else {
      ops.push({ op: '+', text: b[j++] });
    }
  }
  return [...ops, ...removed.slice(i), ...added.slice(j)];
}

/** Unified-diff hunks of `ops`, with `context` unchanged lines around each change. */
export function hunks(ops: DiffLine[], context = CONTEXT): DiffHunk[] {
  const ranges: [number, number][] = [];
  ops.forEach((o, i) => {
    if (o.op === ' ') return;
    const lo = Math.max(0, i - context);
    const hi = Math.min(ops.length, i + context + 1);
    const last = ranges[ranges.length - 1];
    if (last && lo <= last[1]) last[1] = hi;
    else ranges.push([lo, hi]);
  });
  const aBefore = [0];
  const bBefore = [0];
  ops.forEach((o, i) => {
    aBefore[i + 1] = aBefore[i] + (o.op !== '+' ? 1 : 0);
    bBefore[i + 1] = bBefore[i] + (o.op !== '-' ? 1 : 0);
  });
  return ranges.map(([lo, hi]) => {
    const aLen = aBefore[hi] - aBefore[lo];
    const bLen = bBefore[hi] - bBefore[lo];
    const aStart = aLen ? aBefore[lo] + 1 : aBefore[lo];
    const bStart = bLen ? bBefore[lo] + 1 : bBefore[lo];
    return { header: `@@ -${aStart},${aLen} +${bStart},${bLen} @@`, lines: ops.slice(lo, hi) };
  });
}

export function relativePath(path: string, root: string | null | undefined): string {
  if (!root) return path;
  const base = root.replace(/[\\/]+$/, '');
  for (const sep of ['/', '\\']) {
    if (path.startsWith(base + sep)) return path.slice(base.length + 1);
  }
  return path;
}

export function diffModel(item: DiffContent, root?: string | null): DiffModel {
  const isNew = item.oldText === null || item.oldText === undefined;
  const a = splitLines(item.oldText);
  const b = splitLines(item.newText);
  const base = { path: item.path, displayPath: relativePath(item.path, root), isNew };
  if (a.length > MAX_DIFF_LINES || b.length > MAX_DIFF_LINES) {
    return { ...base, added: 0, removed: 0, hunks: [], tooLarge: { oldLines: a.length, newLines: b.length } };
  }
  const ops = diffLines(a, b);
  return {
    ...base,
    added: ops.filter((o) => o.op === '+').length,
    removed: ops.filter((o) => o.op === '-').length,
    hunks: hunks(ops),
  };
}
