/* Composer web chat page: tool-call cards (kind, title, status, locations, output, input) and the
 * diff blocks of edits, in the transcript and in permission cards (permissions.js); paths show
 * relative to the workspace. Tool text goes in as text nodes only. */

import {contentText, el, plural} from "./dom.js";
import {MAX_DIFF_LINES, diffLines, hunks, prefixed, splitLines} from "./diff.js";
import {state} from "./state.js";

const OPEN_OUTPUT_LINES = 12;     // text output longer than this starts collapsed

const KINDS = {
  read: ["\u2261", "read"], edit: ["\u270E", "edit"], delete: ["\u2716", "delete"],
  move: ["\u21C4", "move"], search: ["\u2315", "search"], execute: ["\u25B6", "run"],
  think: ["\u2026", "think"], fetch: ["\u21E3", "fetch"], switch_mode: ["\u21C6", "mode"],
  other: ["\u2022", "tool"],
};
const STATUS_LABELS = {pending: "pending", in_progress: "running", completed: "done", failed: "failed"};

export function displayPath(s, path) {
  const p = String(path || "");
  const base = (s && s.cwd) || state.workspaceRoot;
  const root = base ? base.replace(/\/+$/, "") + "/" : null;
  return root && p.startsWith(root) ? p.slice(root.length) : p;
}

/* A call's absolute location beside its relative `path` argument tells where the workspace is. */
function learnRoot(s, call) {
  if (s.cwd || !call) return;
  const rel = call.rawInput && typeof call.rawInput.path === "string" ? call.rawInput.path.replace(/^\.\//, "") : "";
  const loc = Array.isArray(call.locations) && call.locations[0] && String(call.locations[0].path || "");
  if (rel && !rel.startsWith("/") && loc && loc.endsWith(`/${rel}`)) s.cwd = loc.slice(0, loc.length - rel.length - 1);
}

function kindBadge(kind) {
  const [icon, label] = KINDS[kind] || KINDS.other;
  return el("span", {class: "tool-kind", "data-kind": kind || "other"},
    el("span", {class: "tool-icon", "aria-hidden": "true", text: icon}), label);
}

export function newTool(s, id, placeholder) {
  const head = el("button", {type: "button", class: "tool-head", "aria-expanded": "true"});
  const body = el("div", {class: "tool-body"});
  const card = el("div", {class: "tool-call", "data-tool-call-id": id, "data-testid": "tool-call"}, head, body);
  head.addEventListener("click", () => {
    const collapsed = card.classList.toggle("collapsed");
    head.setAttribute("aria-expanded", collapsed ? "false" : "true");
  });
  card.dataset.placeholder = placeholder ? "true" : "false";
  const tool = {id, card, head, body, placeholder, title: "Tool call", kind: "other", status: "pending",
    rawInput: undefined, locations: [], content: [], rawOutput: undefined};
  s.tools.set(id, tool);  // an id used again (some models number calls per step) maps to the newest card
  s.view.append(card);
  return tool;
}

/* tool_call (isNew) makes a card, or fills the one a permission question made for it;
 * tool_call_update changes the fields it has (content replaces the whole list). */
export function upsertTool(s, update, isNew) {
  const id = String(update.toolCallId || "");
  let tool = s.tools.get(id);
  if (!tool || (isNew && !tool.placeholder)) tool = newTool(s, id, false);
  if (isNew) {
    tool.placeholder = false;
    tool.card.dataset.placeholder = "false";
  }
  learnRoot(s, update);
  for (const key of ["title", "kind", "status", "rawInput", "locations", "content", "rawOutput"]) {
    if (update[key] !== undefined) tool[key] = update[key];
  }
  renderTool(s, tool);
}

function renderTool(s, tool) {
  tool.card.dataset.status = tool.status || "pending";
  tool.card.dataset.kind = tool.kind || "other";
  tool.head.replaceChildren(
    kindBadge(tool.kind),
    el("span", {class: "tool-title", text: tool.title || "Tool call"}),
    el("span", {class: "tool-status", "data-status": tool.status || "pending",
      text: STATUS_LABELS[tool.status] || tool.status || "pending"}));
  const parts = [];
  const locations = Array.isArray(tool.locations) ? tool.locations : [];
  if (locations.length) {
    parts.push(el("div", {class: "tool-locations"}, ...locations.map((loc) =>
      el("span", {class: "location", text: displayPath(s, loc.path) + (loc.line ? `:${loc.line}` : "")}))));
  }
  const content = Array.isArray(tool.content) ? tool.content : [];
  // A running command's output: open, its newest lines in view, unless the person folded it or
  // scrolled back (then it stays as they left it).
  const live = tool.status === "in_progress";
  const before = live ? liveState(tool.body) : null;
  const open = live ? !(before && before.folded) : undefined;
  for (const item of content) parts.push(renderToolContent(s, item, open));
  if (!content.length && tool.status === "failed" && tool.rawOutput && tool.rawOutput.error) {
    parts.push(el("pre", {class: "tool-output-text error-text", text: String(tool.rawOutput.error)}));
  }
  if (tool.rawInput !== undefined && tool.rawInput !== null) {
    const wasOpen = !!tool.body.querySelector("details.tool-input[open]");  // the person opened it: keep it so
    parts.push(el("details", {class: "tool-input", open: wasOpen}, el("summary", {text: "Input"}),
      el("pre", {text: JSON.stringify(tool.rawInput, null, 2)})));
  }
  tool.body.replaceChildren(...parts);
  if (live) {
    for (const pre of tool.body.querySelectorAll(".tool-output-text")) {
      pre.scrollTop = before && before.scrolledBack ? before.scrollTop : pre.scrollHeight;
    }
  }
}

/* How the person left a running command's output: folded, or scrolled back from its end. */
function liveState(body) {
  const details = body.querySelector("details.tool-output");
  if (!details) return null;
  const pre = details.querySelector("pre");
  // a folded output (or card) has no height: it was not scrolled back, whatever its scrollTop
  const scrolledBack = !!pre && pre.clientHeight > 0 && pre.scrollTop + pre.clientHeight < pre.scrollHeight - 4;
  return {folded: !details.open, scrolledBack, scrollTop: pre ? pre.scrollTop : 0};
}

/* One item of a call's content; `open` undefined: text output opens when it is short. */
function renderToolContent(s, item, open) {
  if (!item || typeof item !== "object") return null;
  if (item.type === "diff") return renderDiff(s, item);
  if (item.type === "terminal") return el("div", {class: "muted", text: `terminal ${item.terminalId}`});
  const text = item.type === "content" ? contentText(item.content) : JSON.stringify(item);
  const lines = text.split("\n").length;
  const pre = el("pre", {class: "tool-output-text", text});
  // running output the person unfolds shows its newest lines (a folded one could not be scrolled);
  // a click, not `toggle`, which also fires for the repaint's own `open`
  const onclick = open === undefined ? null : () => setTimeout(() => { pre.scrollTop = pre.scrollHeight; });
  return el("details", {class: "tool-output", open: open ?? lines <= OPEN_OUTPUT_LINES},
    el("summary", {text: `Output (${plural(lines, "line")})`, onclick}), pre);
}

export function renderDiff(s, item) {
  const path = displayPath(s, item.path);
  const isNew = item.oldText === null || item.oldText === undefined;
  const a = splitLines(isNew ? "" : item.oldText);
  const b = splitLines(item.newText);
  const wrap = el("details", {class: "diff-block", open: true, "data-path": item.path || "", "data-testid": "diff"});
  const summary = el("summary", {class: "diff-summary"}, el("span", {class: "diff-path", text: path}));
  wrap.append(summary);
  if (a.length > MAX_DIFF_LINES || b.length > MAX_DIFF_LINES) {
    summary.append(el("span", {class: "muted", text: ` ${a.length} -> ${b.length} lines (too large to show)`}));
    return wrap;
  }
  const ops = diffLines(a, b);
  const added = ops.filter((o) => o.op === "+").length;
  const removed = ops.filter((o) => o.op === "-").length;
  if (isNew) summary.append(el("span", {class: "diff-tag", text: " new file"}));
  summary.append(
    el("span", {class: "diff-stat-add", text: ` +${added}`}),
    el("span", {class: "diff-stat-del", text: ` -${removed}`}));
  const pre = el("pre", {class: "diff"},
    el("span", {class: "diff-line diff-file", text: isNew ? "--- /dev/null" : `--- ${prefixed("a", path)}`}),
    el("span", {class: "diff-line diff-file", text: `+++ ${prefixed("b", path)}`}));
  const found = hunks(ops);
  if (!found.length) pre.append(el("span", {class: "diff-line diff-hunk", text: "(no changes)"}));
  for (const hunk of found) {
    pre.append(el("span", {class: "diff-line diff-hunk", text: hunk.header}));
    for (const line of hunk.lines) {
      const cls = line.op === "+" ? "diff-add" : line.op === "-" ? "diff-del" : "diff-ctx";
      pre.append(el("span", {class: `diff-line ${cls}`, text: line.op + line.text}));
    }
  }
  wrap.append(pre);
  return wrap;
}
