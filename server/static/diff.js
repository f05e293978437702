/* Composer web chat page: the line diff behind the diff blocks of tool calls and permission
 * cards (tools.js draws them): lines of a text, an LCS line diff, unified-diff hunks. No DOM. */

export const MAX_DIFF_LINES = 4000;      // per side; larger files get a summary instead of a diff
const MAX_DIFF_CELLS = 4000000;          // LCS table size past which the diff is "all old, all new"
const DIFF_CONTEXT = 3;                  // lines of context around a change

export function splitLines(text) {
  if (!text) return [];
  const lines = String(text).split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/* Line diff of a and b: [{op: " " | "-" | "+", text}], by LCS over what lies between the common
 * prefix and suffix (all-removed-then-all-added when that middle is too large to tabulate). */
export function diffLines(a, b) {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const ops = [];
  for (let i = 0; i < start; i++) ops.push({op: " ", text: a[i]});
  const n = endA - start;
  const m = endB - start;
  if (n * m > MAX_DIFF_CELLS) {
    for (let i = start; i < endA; i++) ops.push({op: "-", text: a[i]});
    for (let j = start; j < endB; j++) ops.push({op: "+", text: b[j]});
  } else {
    const w = m + 1;
    const dp = new Uint32Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        dp[i * w + j] = a[start + i] === b[start + j]
          ? dp[(i + 1) * w + j + 1] + 1
          : Math.max(dp[(i + 1) * w + j], dp[i * w + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (a[start + i] === b[start + j]) {
        ops.push({op: " ", text: a[start + i]});
        i++;
        j++;
      } else if (dp[(i + 1) * w + j] >= dp[i * w + j + 1]) {
        ops.push({op: "-", text: a[start + i]});
        i++;
      } else {
        ops.push({op: "+", text: b[start + j]});
        j++;
      }
    }
    for (; i < n; i++) ops.push({op: "-", text: a[start + i]});
    for (; j < m; j++) ops.push({op: "+", text: b[start + j]});
  }
  for (let i = endA; i < a.length; i++) ops.push({op: " ", text: a[i]});
  return ops;
}

/* Unified-diff hunks of `ops`, each {header, lines}, with DIFF_CONTEXT lines of context. */
export function hunks(ops) {
  const changed = [];
  ops.forEach((o, i) => {
    if (o.op !== " ") changed.push(i);
  });
  if (!changed.length) return [];
  const ranges = [];
  for (const i of changed) {
    const lo = Math.max(0, i - DIFF_CONTEXT);
    const hi = Math.min(ops.length, i + DIFF_CONTEXT + 1);
    const last = ranges[ranges.length - 1];
    if (last && lo <= last[1]) last[1] = hi;
    else ranges.push([lo, hi]);
  }
  const aBefore = [0];
  const bBefore = [0];
  ops.forEach((o, i) => {
    aBefore[i + 1] = aBefore[i] + (o.op !== "+" ? 1 : 0);
    bBefore[i + 1] = bBefore[i] + (o.op !== "-" ? 1 : 0);
  });
  return ranges.map(([lo, hi]) => {
    const aLen = aBefore[hi] - aBefore[lo];
    const bLen = bBefore[hi] - bBefore[lo];
    const aStart = aLen ? aBefore[lo] + 1 : aBefore[lo];
    const bStart = bLen ? bBefore[lo] + 1 : bBefore[lo];
    return {header: `@@ -${aStart},${aLen} +${bStart},${bLen} @@`, lines: ops.slice(lo, hi)};
  });
}

export function prefixed(side, path) {
  return path.startsWith("/") ? path : `${side}/${path}`;
}
