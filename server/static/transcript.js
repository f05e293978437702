/* Composer web chat page: the transcript of a session. session/update notifications land here
 * (messages streaming in, thoughts, tool calls, plan, usage, title, mode), and so do the page's
 * own notes (turn ends, undo). Markdown-lite rendering: code fences, `spans`, **strong** and *em*,
 * as elements holding text nodes only (never HTML from the model). */

import {$, contentText, el} from "./dom.js";
import {renderPlan, renderTitle, renderUsage} from "./chrome.js";
import {renderModes, renderSessions} from "./sessions.js";
import {sessions, state} from "./state.js";
import {upsertTool} from "./tools.js";

function nearEnd() {
  const t = $("#transcript");
  return t.scrollHeight - t.scrollTop - t.clientHeight < 120;
}

export function scrollToEnd() {
  const t = $("#transcript");
  t.scrollTop = t.scrollHeight;
}

export function onUpdate(sessionId, update) {
  const s = sessions.get(sessionId);
  if (!s) return;
  const follow = state.current === s && nearEnd();
  switch (update.sessionUpdate) {
    case "user_message_chunk": appendChunk(s, "user", contentText(update.content)); break;
    case "agent_message_chunk": appendChunk(s, "agent", contentText(update.content)); break;
    case "agent_thought_chunk": appendChunk(s, "thought", contentText(update.content)); break;
    case "tool_call":
      s.last = null;  // what the agent says after a tool call is a new message
      upsertTool(s, update, true);
      break;
    case "tool_call_update":
      s.last = null;
      upsertTool(s, update, false);
      break;
    case "plan":
      s.plan = Array.isArray(update.entries) ? update.entries : [];
      if (state.current === s) renderPlan();
      break;
    case "usage_update":
      s.usage = {used: update.used, size: update.size, cost: update.cost};
      if (state.current === s) renderUsage();
      break;
    case "session_info_update":
      if (update.title) {
        s.title = update.title;
        renderTitle();
        renderSessions();
      }
      break;
    case "current_mode_update":
      s.mode = update.currentModeId || s.mode;
      if (state.current === s) renderModes();
      break;
    default:
      break;
  }
  if (follow) scrollToEnd();
}

export function appendChunk(s, kind, text) {
  if (!s.last || s.last.kind !== kind) {
    let node;
    const body = el("div", {class: "body"});
    if (kind === "thought") {
      node = el("details", {class: "message thought", "data-testid": "message-thought"},
        el("summary", {text: "Thinking"}), body);
    } else {
      node = el("div", {class: `message ${kind}`, "data-testid": `message-${kind}`},
        el("div", {class: "role", text: kind === "user" ? "You" : "Composer"}), body);
    }
    // a question's card made ahead of its tool_call stays below the message that leads to it
    let before = null;
    for (let n = s.view.lastElementChild; n && n.dataset.placeholder === "true"; n = n.previousElementSibling) before = n;
    s.view.insertBefore(node, before);
    s.last = {kind, node, body, text: ""};
  }
  s.last.text += text;
  renderText(s.last.body, s.last.text);
}

/* Markdown-lite: ``` fences become code blocks; `code`, **strong** and *em* (or _em_) spans
 * inside paragraphs; everything else is text. A `*` inside a word (2*3) stays a star. */
const INLINE = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|(?<![\w*])([*_])([^*_\s][^*_\n]*?)\3(?![\w*])/g;

function renderText(body, text) {
  const nodes = [];
  const parts = text.split("```");
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const newline = part.indexOf("\n");
      const lang = newline >= 0 ? part.slice(0, newline).trim() : "";
      const code = newline >= 0 ? part.slice(newline + 1) : part;
      nodes.push(el("pre", {class: "code", "data-lang": lang || null}, el("code", {}, code.replace(/\n$/, ""))));
      return;
    }
    if (i > 0) part = part.replace(/^\n/, "");
    if (i < parts.length - 1) part = part.replace(/\n$/, "");
    const para = el("div", {class: "text"});
    let at = 0;
    for (const m of part.matchAll(INLINE)) {
      if (m.index > at) para.append(part.slice(at, m.index));
      const [tag, inner] = m[1] !== undefined ? ["code", m[1]] : m[2] !== undefined ? ["strong", m[2]] : ["em", m[4]];
      para.append(el(tag, {}, inner));
      at = m.index + m[0].length;
    }
    if (at < part.length) para.append(part.slice(at));
    if (para.childNodes.length) nodes.push(para);
  });
  body.replaceChildren(...nodes);
}

export function appendNote(s, kind, text, attrs) {
  s.last = null;
  const node = el("div", Object.assign({class: `note ${kind}`, "data-testid": `note-${kind}`}, attrs || {}), text);
  s.view.append(node);
  if (state.current === s) scrollToEnd();
  return node;
}
