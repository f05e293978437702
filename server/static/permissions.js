/* Composer web chat page: permission cards, the page's answer to the server's
 * session/request_permission. The question (its reasons, the edit's diff or the command and a
 * weaker sandbox's warning, else the tool's input, one button per option the server offers) goes
 * into the tool call's card; an answer, a cancel or a dropped connection settles it. A revisable
 * edit also gets "Edit" (revision.js), and allowing it sends the person's version along. */

import {el} from "./dom.js";
import {renderTitle} from "./chrome.js";
import {revisableDiff, revisionEditor} from "./revision.js";
import {renderSessions} from "./sessions.js";
import {sessions, state} from "./state.js";
import {newTool, renderDiff, upsertTool} from "./tools.js";
import {scrollToEnd} from "./transcript.js";

/* The question goes into the tool call's card (made from the question when the tool_call
 * notification has not come yet: it does not end the agent message being streamed). */
export function askPermission(params) {
  const s = sessions.get(params.sessionId);
  if (!s) return Promise.resolve({outcome: {outcome: "cancelled"}});
  return new Promise((resolve) => {
    const call = params.toolCall || {};
    const id = String(call.toolCallId || "");
    let tool = s.tools.get(id);
    if (!tool || tool.status === "completed" || tool.status === "failed") {
      tool = newTool(s, id, true);  // the tool_call notification will fill it in
      upsertTool(s, Object.assign({}, call, {content: undefined}), false);
    }
    const options = Array.isArray(params.options) ? params.options : [];
    const asked = (((params._meta || {}).composer || {}).asked) || [];
    const card = el("div", {class: "permission", role: "group", "data-tool-call-id": call.toolCallId || "",
      "data-testid": "permission", "aria-label": "Permission needed"});
    const actions = el("div", {class: "permission-actions"});
    const entry = {card, resolve: null};
    let editor = null;
    const finish = (outcome, label, meta) => {
      if (!s.permissions.has(entry)) return;
      s.permissions.delete(entry);
      card.classList.add("answered");
      tool.card.classList.remove("awaiting");
      card.querySelectorAll("details.diff-block").forEach((d) => {
        d.open = false;  // the card shows the diff again once the edit is done
      });
      card.dataset.outcome = outcome.outcome === "selected" ? outcome.optionId : outcome.outcome;
      card.querySelectorAll("button").forEach((b) => {
        b.disabled = true;
      });
      if (editor) editor.close();
      actions.append(el("span", {class: "permission-answer", text: label}));
      resolve(meta ? {outcome, _meta: meta} : {outcome});
      renderSessions();
      renderTitle();
    };
    entry.resolve = finish;
    const choose = (option, meta) => finish({outcome: "selected", optionId: option.optionId},
      `You chose: ${option.name || option.optionId}${meta ? " (with your changes)" : ""}`, meta);
    card.append(el("div", {class: "permission-head"},
      el("span", {class: "permission-label", text: "Permission needed:"}),
      el("span", {class: "permission-title", text: call.title || "a tool call"})));
    if (asked.length) {
      card.append(el("ul", {class: "permission-reasons"},
        ...asked.map((p) => el("li", {text: String(p.text || "")}))));
    }
    const content = Array.isArray(call.content) ? call.content : [];
    const diffs = content.filter((c) => c && c.type === "diff");
    for (const d of diffs) card.append(renderDiff(s, d));
    const revisable = revisableDiff(params);
    if (revisable) {
      editor = revisionEditor(s, revisable, card.querySelector("details.diff-block"));
      card.append(editor.panel);
    }
    const texts = content.filter((c) => c && c.type === "content" && c.content && typeof c.content.text === "string")
      .map((c) => c.content.text);
    for (const text of texts) {
      card.append(text.startsWith("Warning:")
        ? el("div", {class: "permission-warning", role: "note", "data-testid": "permission-warning", text})
        : el("pre", {class: "permission-input", text}));
    }
    if (!diffs.length && !texts.length && call.rawInput !== undefined && call.rawInput !== null) {
      card.append(el("pre", {class: "permission-input", text: JSON.stringify(call.rawInput, null, 2)}));
    }
    for (const option of options) {
      const kind = String(option.kind || "");
      const allow = kind.startsWith("allow");  // only an allow answer carries the person's version
      actions.append(el("button", {
        type: "button", class: allow ? "allow" : "reject",
        "data-option-id": option.optionId, "data-kind": kind,
        onclick: () => choose(option, allow && editor ? editor.meta() : null),
      }, option.name || option.optionId));
    }
    if (editor) actions.append(editor.toggle);
    card.append(actions);
    s.permissions.add(entry);
    tool.card.classList.add("awaiting");
    tool.card.classList.remove("collapsed");
    tool.card.append(card);
    if (state.current === s) scrollToEnd();  // a question is worth the jump
    renderSessions();
    renderTitle();
    if (state.current === s) {
      const first = actions.querySelector("button.allow");
      if (first && document.activeElement === document.body) first.focus();
    }
  });
}

export function settlePermissions(s, why) {
  for (const entry of Array.from(s.permissions)) entry.resolve({outcome: "cancelled"}, `Cancelled (${why})`);
}
