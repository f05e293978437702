/* Composer web chat page: the page's chrome around the transcript: the title (and the tab's,
 * which flags a waiting question), the sandbox's isolation level, the plan, context usage, and
 * which controls are enabled ("Review changes" and its panel: review.js). */

import {$, el, shortNumber} from "./dom.js";
import {conn} from "./rpc.js";
import {renderReviewControls} from "./review.js";
import {renderModes, renderSessions} from "./sessions.js";
import {sessions, state} from "./state.js";

export function renderTitle() {
  const title = state.current ? (state.current.title || "Untitled session") : "New session";
  $("#session-title").textContent = title;
  let waiting = 0;
  for (const s of sessions.values()) waiting += s.permissions.size;
  document.title = `${waiting ? "(!) " : ""}${title} - Composer`;
}

/* The server's composer/isolation answer (agent/isolation.py): the sandbox level commands run
 * with, flagged when it is weaker than bubblewrap; the tooltip says what that lets through. */
export function renderIsolation(status) {
  const node = $("#isolation");
  node.hidden = !status || !status.level;
  if (node.hidden) return;
  node.textContent = `Sandbox: ${status.level}${status.weaker ? " (weaker than bubblewrap)" : ""}`;
  node.dataset.level = String(status.level);
  node.dataset.weaker = status.weaker ? "true" : "false";
  node.title = String(status.message || "");
}

export function renderPlan() {
  const entries = (state.current && state.current.plan) || [];
  $("#plan").hidden = !entries.length;
  const done = entries.filter((e) => e.status === "completed").length;
  $("#plan-progress").textContent = entries.length ? `${done}/${entries.length} done` : "";
  $("#plan-entries").replaceChildren(...entries.map((e) => el("li", {
    class: "plan-entry", "data-status": e.status || "pending", "data-priority": e.priority || "medium",
  }, el("span", {class: "plan-mark", "aria-hidden": "true"}), el("span", {class: "plan-text", text: String(e.content || "")}),
  e.priority === "high" ? el("span", {class: "badge high", text: "high"}) : null)));
}

export function renderUsage() {
  const u = state.current && state.current.usage;
  const node = $("#usage");
  if (!u || typeof u.used !== "number") {
    node.textContent = "";
    return;
  }
  const pct = u.size ? Math.round((100 * u.used) / u.size) : 0;
  let text = `Context ${shortNumber(u.used)} / ${shortNumber(u.size || 0)} tokens (${pct}%)`;
  if (u.cost && typeof u.cost.amount === "number") text += ` \u00B7 ${u.cost.amount.toFixed(4)} ${u.cost.currency || ""}`.trimEnd();
  node.textContent = text;
  node.dataset.level = pct >= 90 ? "high" : pct >= 70 ? "medium" : "low";
}

export function renderChrome() {
  renderTitle();
  renderModes();
  renderPlan();
  renderUsage();
  renderSessions();
  updateControls();
}

export function updateControls() {
  const s = state.current;
  const running = Boolean(s && s.running);
  const busy = running || state.sending || Boolean(s && s.loading);
  $("#send").disabled = !conn.ready || busy;
  $("#send").hidden = running;
  $("#cancel").hidden = !running;
  $("#cancel").disabled = !conn.ready;
  $("#mode").disabled = !conn.ready || busy;
  $("#undo").disabled = !conn.ready || !s || !s.attached || busy;
  renderReviewControls();
  $("#new-session").disabled = !conn.ready;
  $("#app").dataset.running = running ? "true" : "false";
  const status = $("#turn-status");
  if (running) status.textContent = s.permissions.size ? "Waiting for your answer..." : "Composer is working...";
  else if (state.sending) status.textContent = "Starting...";
  else if (s && s.loading) status.textContent = "Loading...";
  else status.textContent = "";
}

export function autosize() {
  const box = $("#prompt");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
}
