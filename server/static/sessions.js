/* Composer web chat page: sessions. The sidebar (session/list), opening one (session/load replays
 * its history), the draft that becomes a session on the first prompt (session/new), the session
 * remembered in the address (#session=ID), and modes: session/set_mode, with the mode chosen for
 * each session remembered in this tab (sessionStorage) and put back when it is loaded again. */

import {$, el, showError, when} from "./dom.js";
import {renderChrome, renderTitle} from "./chrome.js";
import {conn, request} from "./rpc.js";
import {sessions, state} from "./state.js";
import {scrollToEnd} from "./transcript.js";

let creating = null;   // the session/new in flight
let listed = [];       // session/list's answer

function makeSession(id) {
  const s = {
    id, attached: false, running: false, loading: false, title: null,
    view: el("div", {class: "session-view", "data-session-id": id}),
    last: null, tools: new Map(), permissions: new Set(), plan: [], usage: null,
    mode: null, modes: null, modePending: Promise.resolve(), cwd: null,
  };
  const entry = listed.find((e) => e.sessionId === id);
  if (entry) {
    s.title = entry.title || null;
    s.cwd = entry.cwd || null;
  }
  sessions.set(id, s);
  return s;
}

function remember(id) {
  const hash = id ? `#session=${encodeURIComponent(id)}` : "";
  history.replaceState(null, "", location.pathname + location.search + hash);
}

export function sessionFromAddress() {
  const m = /(?:^#|&)session=([^&]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

export function showDraft() {
  state.current = null;
  remember(null);
  const empty = el("div", {class: "empty-state"},
    el("h2", {text: "What should Composer do?"}),
    el("p", {text: "Describe a change; Composer reads the workspace, edits files and runs commands. " +
      "In Review edits mode every edit waits for you to accept its diff."}));
  $("#transcript").replaceChildren(empty);
  renderChrome();
  $("#prompt").focus();
}

function show(s) {
  state.current = s;
  remember(s.id);
  $("#transcript").replaceChildren(s.view);
  renderChrome();
  scrollToEnd();
}

export async function openSession(id) {
  if (state.current && state.current.id === id) return;
  const known = sessions.get(id);
  if (known && known.attached) {
    show(known);
    return;
  }
  if (!conn.ready) {
    showError("Not connected to the server.", true);
    return;
  }
  const s = makeSession(id);
  s.loading = true;
  s.view.append(el("div", {class: "loading", text: "Loading the session..."}));
  show(s);
  try {
    const result = await request("session/load", {sessionId: id, mcpServers: []});
    s.view.querySelectorAll(":scope > .loading").forEach((n) => n.remove());
    s.attached = true;
    s.last = null;
    applyModes(s, result && result.modes);
    // the server opens a session in its default mode: put back the one chosen for it in this tab
    const chosen = storedMode(id);
    if (chosen && chosen !== s.mode && (s.modes || []).some((m) => m.id === chosen)) await setMode(s, chosen);
  } catch (err) {
    sessions.delete(id);
    showError(`Could not open session ${id}: ${err.message}`);
    if (state.current === s) showDraft();
    return;
  } finally {
    s.loading = false;
  }
  if (state.current === s) {
    renderChrome();
    scrollToEnd();
  }
}

export async function ensureSession() {
  if (state.current) return state.current;
  if (!creating) {
    const wanted = state.draftMode;  // only a mode the person picked; else the server's default
    creating = (async () => {
      const result = await request("session/new", {mcpServers: []});
      const s = makeSession(result.sessionId);
      s.attached = true;
      applyModes(s, result.modes);
      show(s);
      if (wanted && wanted !== s.mode && (s.modes || []).some((m) => m.id === wanted)) await setMode(s, wanted);
      return s;
    })();
    creating.finally(() => {
      creating = null;
    }).catch(() => {});
  }
  return creating;
}

export async function refreshSessions() {
  if (!conn.ready) return;
  try {
    const result = await request("session/list", {});
    listed = (result && result.sessions) || [];
    for (const entry of listed) {
      if (entry.cwd) state.workspaceRoot = state.workspaceRoot || entry.cwd;
      const s = sessions.get(entry.sessionId);
      if (s && entry.title && !s.title) s.title = entry.title;
      if (s && entry.cwd) s.cwd = entry.cwd;
    }
    renderSessions();
    renderTitle();
  } catch (err) {
    showError(`Could not list the sessions: ${err.message}`);
  }
}

export function renderSessions() {
  const list = $("#sessions");
  const rows = [];
  const seen = new Set();
  for (const s of sessions.values()) {  // opened here but not in the list yet (new, still empty)
    if (!listed.some((e) => e.sessionId === s.id)) rows.push({sessionId: s.id, title: s.title, updatedAt: null});
  }
  rows.push(...listed);
  const items = [];
  for (const entry of rows) {
    if (seen.has(entry.sessionId)) continue;
    seen.add(entry.sessionId);
    const s = sessions.get(entry.sessionId);
    const title = (s && s.title) || entry.title;
    const button = el("button", {
      type: "button", class: "session-item", "data-session-id": entry.sessionId, title: entry.sessionId,
      "aria-current": state.current && state.current.id === entry.sessionId ? "true" : null,
      onclick: () => openSession(entry.sessionId),
    },
    el("span", {class: `session-name${title ? "" : " untitled"}`, text: title || "Untitled session"}),
    el("span", {class: "session-meta"},
      s && s.running ? el("span", {class: "badge running", text: "running"}) : null,
      s && s.permissions.size ? el("span", {class: "badge attention", text: "needs you"}) : null,
      when(entry.updatedAt) || (s ? "open" : "")));
    items.push(el("li", {}, button));
  }
  if (!items.length) items.push(el("li", {class: "muted sessions-empty", text: "No sessions yet."}));
  list.replaceChildren(...items);
}

// ---- modes --------------------------------------------------------------------------------------

function applyModes(s, modes) {
  if (!modes) return;
  s.mode = modes.currentModeId || s.mode;
  if (Array.isArray(modes.availableModes) && modes.availableModes.length) s.modes = modes.availableModes;
  if (state.current === s) renderModes();
}

export function renderModes() {
  const select = $("#mode");
  const s = state.current;
  if (s && s.modes) {
    const have = Array.from(select.options).map((o) => o.value).join(",");
    if (have !== s.modes.map((m) => m.id).join(",")) {
      select.replaceChildren(...s.modes.map((m) => el("option", {value: m.id, title: m.description || null}, m.name || m.id)));
    }
  }
  if (s && s.mode) select.value = s.mode;
  const chosen = s && s.modes && s.modes.find((m) => m.id === select.value);
  select.title = (chosen && chosen.description) || "";
}

function storedMode(id) {
  try {
    return sessionStorage.getItem(`composer.mode.${id}`);
  } catch (err) {
    return null;
  }
}

function storeMode(id, modeId) {
  try {
    sessionStorage.setItem(`composer.mode.${id}`, modeId);
  } catch (err) {
    // private mode or storage off: the choice lasts as long as the connection
  }
}

function setMode(s, modeId) {
  const before = s.mode;
  const pending = request("session/set_mode", {sessionId: s.id, modeId}).then(() => {
    s.mode = modeId;
    storeMode(s.id, modeId);
  }, (err) => {
    showError(`Could not switch to ${modeId} mode: ${err.message}`);
    s.mode = before;
  }).finally(() => {
    if (state.current === s) renderModes();
  });
  s.modePending = pending;
  return pending;
}

export function onModeChange() {
  const modeId = $("#mode").value;
  if (state.current && state.current.attached) setMode(state.current, modeId);
  else state.draftMode = modeId;  // in a draft the choice is applied when the session is created
}
