/* Composer web chat page: the browser client of `python -m server --ws` (server/static/index.html
 * loads this module, which imports the rest). It speaks JSON-RPC 2.0 over one WebSocket (rpc.js)
 * with ACP's session methods (session/new, /load, /list, /prompt, /set_mode, /cancel),
 * composer/rewind for "Undo last turn", composer/turnChanges and composer/reviewHunks for "Review
 * changes" (review.js: keep or undo the last turn's changes hunk by hunk), and answers the server's session/request_permission.
 *
 * What it shows: the sessions of the workspace (sidebar, sessions.js), the transcript of the
 * current one with the answer streaming in (transcript.js), tool-call cards with diffs (tools.js,
 * diff.js), permission cards (permissions.js; revision.js lets the person change a proposed
 * edit before allowing it), the sandbox's isolation level (composer/isolation),
 * the plan, context usage and controls (chrome.js), errors and the connection state (dom.js). Turns are in turns.js, shared state in state.js.
 * Sessions are created lazily on the first prompt, so opening the page leaves no empty session
 * behind; the current one is remembered in the address (#session=ID) so a reload or reconnect
 * reopens it (session/load replays its history).
 *
 * This file: the connection's life (connect, initialize, close, reconnect), what the server's
 * requests and notifications mean for the page, and the wiring of the page's controls.
 * Plain JS modules, no build step, no network fetches besides the socket and these files (the
 * imports carry the token in the same-site cookie the page sets). Model and tool text only ever
 * reaches the page through textContent / text nodes, never innerHTML.
 */

import {$, hideError, setConnection, showError, toast} from "./dom.js";
import {autosize, renderChrome, renderIsolation, updateControls} from "./chrome.js";
import {askPermission, settlePermissions} from "./permissions.js";
import {TOKEN, conn, notify, openSocket, request, socketClosed} from "./rpc.js";
import {onModeChange, openSession, refreshSessions, renderSessions, sessionFromAddress, showDraft} from "./sessions.js";
import {sessions, state} from "./state.js";
import {closeReview, keepAll, toggleReview} from "./review.js";
import {cancelTurn, sendPrompt, undoLastTurn} from "./turns.js";
import {onUpdate} from "./transcript.js";

// ---- the connection's life ----------------------------------------------------------------------

let resumeId = null;   // the session to reopen once connected (address or the one before a drop)

function connect() {
  hideError();
  setConnection("connecting", "connecting");
  try {
    openSocket({
      open: () => start().catch((err) => showError(`Could not start: ${err.message}`)),
      close: onClosed,
      request: onServerRequest,
      notification: onServerNotification,
    });
  } catch (err) {
    setConnection("closed", "disconnected");
    showError(`Could not open the connection: ${err.message}`, true);
  }
}

async function start() {
  setConnection("connecting", "starting");
  const result = await request("initialize", {
    processId: null, rootUri: null, capabilities: {}, clientInfo: {name: "composer-web"},
  });
  notify("initialized", {});
  const info = (result && result.serverInfo) || {};
  $("#server-info").textContent = [info.name, info.version].filter(Boolean).join(" ");
  renderIsolation(await request("composer/isolation", {}));
  conn.ready = true;
  setConnection("connected", "connected");
  updateControls();
  refreshSessions();
  const target = resumeId;
  resumeId = null;
  if (target) await openSession(target);
  else showDraft();
}

function onClosed(event) {
  const wasReady = conn.ready;
  socketClosed();
  if (state.current) resumeId = state.current.id;
  for (const s of sessions.values()) {
    settlePermissions(s, "connection closed");
    s.attached = false;
    s.running = false;
  }
  setConnection("closed", "disconnected");
  const why = event && event.code && event.code !== 1000 && event.code !== 1005
    ? ` (code ${event.code}${event.reason ? `: ${event.reason}` : ""})` : "";
  if (!conn.opened) {
    showError(`Could not connect to the server${why}. Is it running, and is the token in this address right?`, true);
  } else {
    showError(`The connection to the server closed${why}.${wasReady && resumeId ? " Reconnecting reopens this session." : ""}`, true);
  }
  updateControls();
  renderSessions();
}

/* The server's requests: a permission question, or a message that wants an answer; any other
 * gets null. */
function onServerRequest(method, params) {
  if (method === "session/request_permission") return askPermission(params);
  if (method === "window/showMessageRequest") toast(String(params.message || ""), params.type === 1 ? "error" : "info");
  return null;
}

function onServerNotification(method, params) {
  if (method === "session/update") {
    onUpdate(params.sessionId, params.update || {});
  } else if (method === "window/showMessage") {
    toast(String(params.message || ""), params.type === 1 ? "error" : params.type === 2 ? "warning" : "info");
  } else if (method === "window/logMessage") {
    const log = params.type === 1 ? console.error : params.type === 2 ? console.warn : console.log;
    log.call(console, "composer server:", params.message);
  }
}

function reconnect() {
  if (conn.ws && conn.ws.readyState !== WebSocket.CLOSED) return;
  sessions.clear();
  state.current = null;
  $("#transcript").replaceChildren();
  connect();
}

// ---- wiring -------------------------------------------------------------------------------------

function main() {
  $("#composer").addEventListener("submit", (event) => {
    event.preventDefault();
    sendPrompt();
  });
  const box = $("#prompt");
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.isComposing) {
      event.preventDefault();
      sendPrompt();
    } else if (event.key === "Escape" && state.current && state.current.running) {
      event.preventDefault();
      cancelTurn();
    }
  });
  box.addEventListener("input", autosize);
  $("#cancel").addEventListener("click", cancelTurn);
  $("#mode").addEventListener("change", onModeChange);
  $("#undo").addEventListener("click", undoLastTurn);
  $("#review-changes").addEventListener("click", toggleReview);
  $("#review-keep-all").addEventListener("click", keepAll);
  $("#review-close").addEventListener("click", () => closeReview(true));
  $("#review").addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      closeReview(true);
    }
  });
  $("#new-session").addEventListener("click", () => {
    hideError();
    showDraft();
  });
  $("#refresh-sessions").addEventListener("click", refreshSessions);
  $("#reconnect").addEventListener("click", reconnect);
  $("#error-close").addEventListener("click", hideError);
  $("#toggle-sidebar").addEventListener("click", () => $("#app").classList.toggle("sidebar-hidden"));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.current && state.current.running && event.target !== box) cancelTurn();
  });
  setInterval(() => {
    if (conn.ready) renderSessions();
  }, 60000);
  if (!TOKEN) {
    showError("This address has no ?token=...; open the link the server printed.");
  }
  resumeId = sessionFromAddress();
  renderChrome();
  connect();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
else main();
