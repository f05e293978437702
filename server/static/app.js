/* Composer web chat page: the browser client of `python -m server --ws` (server/static/index.html
 * loads it). It speaks JSON-RPC 2.0 over one WebSocket, ws://HOST:PORT/rpc?token=TOKEN, one message
 * per frame, with ACP's session methods (session/new, /load, /list, /prompt, /set_mode, /cancel),
 * composer/rewind for "Undo last turn", and answers the server's session/request_permission.
 *
 * What it shows: the sessions of the workspace (sidebar), the transcript of the current one with
 * the answer streaming in, tool-call cards (kind, status, output, diffs), permission cards, the
 * plan, context usage, errors and the connection state. Sessions are created lazily on the first
 * prompt, so opening the page leaves no empty session behind; the current one is remembered in the
 * address (#session=ID) so a reload or reconnect reopens it (session/load replays its history).
 *
 * Plain JS, no build step, no network fetches besides the socket. Model and tool text only ever
 * reaches the page through textContent / text nodes, never innerHTML.
 */
"use strict";

(function () {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const MAX_DIFF_LINES = 4000;      // per side; larger files get a summary instead of a diff
  const MAX_DIFF_CELLS = 4000000;   // LCS table size past which the diff is "all old, all new"
  const DIFF_CONTEXT = 3;
  const OPEN_OUTPUT_LINES = 12;     // text output longer than this starts collapsed

  const KINDS = {
    read: ["\u2261", "read"], edit: ["\u270E", "edit"], delete: ["\u2716", "delete"],
    move: ["\u21C4", "move"], search: ["\u2315", "search"], execute: ["\u25B6", "run"],
    think: ["\u2026", "think"], fetch: ["\u21E3", "fetch"], switch_mode: ["\u21C6", "mode"],
    other: ["\u2022", "tool"],
  };
  const STATUS_LABELS = {pending: "pending", in_progress: "running", completed: "done", failed: "failed"};

  // ---- small DOM helpers ------------------------------------------------------------------------

  const $ = (selector) => document.querySelector(selector);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined && child !== false) node.append(child);  // strings become text nodes
    }
    return node;
  }

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  function shortNumber(n) {
    if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
    if (n >= 1e4) return `${Math.round(n / 1e3)}k`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
    return String(n);
  }

  function when(iso) {
    const t = Date.parse(iso || "");
    if (Number.isNaN(t)) return "";
    const s = (Date.now() - t) / 1000;
    if (s < 60) return "just now";
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    if (s < 7 * 86400) return `${Math.floor(s / 86400)} d ago`;
    return new Date(t).toLocaleDateString();
  }

  function contentText(block) {
    if (!block || typeof block !== "object") return "";
    if (block.type === "text") return String(block.text || "");
    if (block.type === "resource_link") return `[${block.name || block.uri}]`;
    if (block.type === "resource") return String((block.resource && block.resource.text) || "[resource]");
    return `[${block.type}]`;
  }

  // ---- JSON-RPC over the WebSocket --------------------------------------------------------------

  class RpcError extends Error {
    constructor(message, code, data) {
      super(message);
      this.code = code;
      this.data = data;
    }
  }

  const conn = {ws: null, nextId: 1, pending: new Map(), ready: false, opened: false};

  function rpcUrl() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}/rpc?token=${encodeURIComponent(TOKEN)}`;
  }

  function send(message) {
    if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) throw new RpcError("not connected to the server");
    conn.ws.send(JSON.stringify(Object.assign({jsonrpc: "2.0"}, message)));
  }

  function request(method, params) {
    return new Promise((resolve, reject) => {
      const id = conn.nextId++;
      try {
        send({id, method, params});
      } catch (err) {
        reject(err);
        return;
      }
      conn.pending.set(id, {resolve, reject, method});
    });
  }

  function notify(method, params) {
    try {
      send({method, params});
    } catch (err) {
      showError(`Could not send ${method}: ${err.message}`);
    }
  }

  function onFrame(data) {
    let message;
    try {
      message = JSON.parse(data);
    } catch (err) {
      console.warn("composer: unreadable frame", data);
      return;
    }
    for (const m of Array.isArray(message) ? message : [message]) {
      try {
        dispatch(m);
      } catch (err) {
        console.error("composer: failed to handle", m, err);
      }
    }
  }

  function dispatch(message) {
    if (!message || typeof message !== "object") return;
    if (typeof message.method === "string") {
      if (message.id !== undefined && message.id !== null) serverRequest(message);
      else serverNotification(message.method, message.params || {});
      return;
    }
    const waiting = conn.pending.get(message.id);
    if (!waiting) return;
    conn.pending.delete(message.id);
    if (message.error) {
      const e = message.error;
      waiting.reject(new RpcError(String(e.message || `error ${e.code}`), e.code, e.data));
    } else {
      waiting.resolve(message.result);
    }
  }

  async function serverRequest(message) {
    let reply;
    try {
      let result = null;  // any request this page does not know gets null, so the server never waits
      if (message.method === "session/request_permission") {
        result = await askPermission(message.params || {});
      } else if (message.method === "window/showMessageRequest") {
        const p = message.params || {};
        toast(String(p.message || ""), p.type === 1 ? "error" : "info");
      }
      reply = {id: message.id, result};
    } catch (err) {
      reply = {id: message.id, error: {code: -32603, message: String((err && err.message) || err)}};
    }
    try {
      send(reply);
    } catch (err) {
      console.warn("composer: could not answer", message.method, err);
    }
  }

  function serverNotification(method, params) {
    if (method === "session/update") {
      onUpdate(params.sessionId, params.update || {});
    } else if (method === "window/showMessage") {
      toast(String(params.message || ""), params.type === 1 ? "error" : params.type === 2 ? "warning" : "info");
    } else if (method === "window/logMessage") {
      const log = params.type === 1 ? console.error : params.type === 2 ? console.warn : console.log;
      log.call(console, "composer server:", params.message);
    }
  }

  // ---- the connection's life --------------------------------------------------------------------

  let resumeId = null;   // the session to reopen once connected (address or the one before a drop)

  function connect() {
    hideError();
    setConnection("connecting", "connecting");
    conn.opened = false;
    let ws;
    try {
      ws = new WebSocket(rpcUrl());
    } catch (err) {
      setConnection("closed", "disconnected");
      showError(`Could not open the connection: ${err.message}`, true);
      return;
    }
    conn.ws = ws;
    ws.addEventListener("open", () => {
      if (conn.ws !== ws) return;
      conn.opened = true;
      start().catch((err) => showError(`Could not start: ${err.message}`));
    });
    ws.addEventListener("message", (event) => {
      if (conn.ws === ws) onFrame(event.data);
    });
    ws.addEventListener("close", (event) => {
      if (conn.ws === ws) onClosed(event);
    });
  }

  async function start() {
    setConnection("connecting", "starting");
    const result = await request("initialize", {
      processId: null, rootUri: null, capabilities: {}, clientInfo: {name: "composer-web"},
    });
    notify("initialized", {});
    const info = (result && result.serverInfo) || {};
    $("#server-info").textContent = [info.name, info.version].filter(Boolean).join(" ");
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
    conn.ready = false;
    conn.ws = null;
    for (const waiting of conn.pending.values()) waiting.reject(new RpcError("the connection to the server closed"));
    conn.pending.clear();
    if (current) resumeId = current.id;
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

  function reconnect() {
    if (conn.ws && conn.ws.readyState !== WebSocket.CLOSED) return;
    sessions.clear();
    current = null;
    $("#transcript").replaceChildren();
    connect();
  }

  function setConnection(state, text) {
    const node = $("#connection");
    node.dataset.state = state;
    node.textContent = text;
  }

  // ---- errors and toasts ------------------------------------------------------------------------

  function showError(text, offerReconnect) {
    $("#error-text").textContent = text;
    $("#reconnect").hidden = !offerReconnect;
    $("#error").hidden = false;
  }

  function hideError() {
    $("#error").hidden = true;
    $("#error-text").textContent = "";
  }

  function toast(text, kind) {
    if (!text) return;
    const node = el("div", {class: `toast ${kind || "info"}`, role: "status"}, text);
    node.addEventListener("click", () => node.remove());
    $("#toasts").append(node);
    setTimeout(() => node.remove(), kind === "error" ? 12000 : 6000);
  }

  // ---- sessions ---------------------------------------------------------------------------------

  const sessions = new Map();   // sessionId -> the page's state of a session opened on this connection
  let current = null;           // the session shown; null for a new (draft) one, created on first send
  let creating = null;          // the session/new in flight
  let listed = [];              // session/list's answer

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

  function sessionFromAddress() {
    const m = /(?:^#|&)session=([^&]+)/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }

  function showDraft() {
    current = null;
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
    current = s;
    remember(s.id);
    $("#transcript").replaceChildren(s.view);
    renderChrome();
    scrollToEnd();
  }

  async function openSession(id) {
    if (current && current.id === id) return;
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
      if (current === s) showDraft();
      return;
    } finally {
      s.loading = false;
    }
    if (current === s) {
      renderChrome();
      scrollToEnd();
    }
  }

  async function ensureSession() {
    if (current) return current;
    if (!creating) {
      const wanted = $("#mode").value;
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

  async function refreshSessions() {
    if (!conn.ready) return;
    try {
      const result = await request("session/list", {});
      listed = (result && result.sessions) || [];
      for (const entry of listed) {
        if (entry.cwd) workspaceRoot = workspaceRoot || entry.cwd;
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

  function renderSessions() {
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
        "aria-current": current && current.id === entry.sessionId ? "true" : null,
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

  // ---- modes ------------------------------------------------------------------------------------

  function applyModes(s, modes) {
    if (!modes) return;
    s.mode = modes.currentModeId || s.mode;
    if (Array.isArray(modes.availableModes) && modes.availableModes.length) s.modes = modes.availableModes;
    if (current === s) renderModes();
  }

  function renderModes() {
    const select = $("#mode");
    const s = current;
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
      if (current === s) renderModes();
    });
    s.modePending = pending;
    return pending;
  }

  function onModeChange() {
    const modeId = $("#mode").value;
    if (current && current.attached) setMode(current, modeId);
    // in a draft the choice is applied when the session is created
  }

  // ---- session updates --------------------------------------------------------------------------

  function nearEnd() {
    const t = $("#transcript");
    return t.scrollHeight - t.scrollTop - t.clientHeight < 120;
  }

  function scrollToEnd() {
    const t = $("#transcript");
    t.scrollTop = t.scrollHeight;
  }

  function onUpdate(sessionId, update) {
    const s = sessions.get(sessionId);
    if (!s) return;
    const follow = current === s && nearEnd();
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
        if (current === s) renderPlan();
        break;
      case "usage_update":
        s.usage = {used: update.used, size: update.size, cost: update.cost};
        if (current === s) renderUsage();
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
        if (current === s) renderModes();
        break;
      default:
        break;
    }
    if (follow) scrollToEnd();
  }

  function appendChunk(s, kind, text) {
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

  /* Markdown-lite: ``` fences become code blocks, `spans` inline code; everything else is text. */
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
      const re = /`([^`\n]+)`/g;
      let at = 0;
      let m;
      while ((m = re.exec(part)) !== null) {
        if (m.index > at) para.append(part.slice(at, m.index));
        para.append(el("code", {}, m[1]));
        at = m.index + m[0].length;
      }
      if (at < part.length) para.append(part.slice(at));
      if (para.childNodes.length) nodes.push(para);
    });
    body.replaceChildren(...nodes);
  }

  function appendNote(s, kind, text, attrs) {
    s.last = null;
    const node = el("div", Object.assign({class: `note ${kind}`, "data-testid": `note-${kind}`}, attrs || {}), text);
    s.view.append(node);
    if (current === s) scrollToEnd();
    return node;
  }

  // ---- tool calls -------------------------------------------------------------------------------

  let workspaceRoot = null;  // the server's workspace, as far as the page has seen it

  function displayPath(s, path) {
    const p = String(path || "");
    const base = (s && s.cwd) || workspaceRoot;
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

  function newTool(s, id, placeholder) {
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
  function upsertTool(s, update, isNew) {
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
    for (const item of content) parts.push(renderToolContent(s, item));
    if (!content.length && tool.status === "failed" && tool.rawOutput && tool.rawOutput.error) {
      parts.push(el("pre", {class: "tool-output-text error-text", text: String(tool.rawOutput.error)}));
    }
    if (tool.rawInput !== undefined && tool.rawInput !== null) {
      parts.push(el("details", {class: "tool-input"}, el("summary", {text: "Input"}),
        el("pre", {text: JSON.stringify(tool.rawInput, null, 2)})));
    }
    tool.body.replaceChildren(...parts);
  }

  function renderToolContent(s, item) {
    if (!item || typeof item !== "object") return null;
    if (item.type === "diff") return renderDiff(s, item);
    if (item.type === "terminal") return el("div", {class: "muted", text: `terminal ${item.terminalId}`});
    const text = item.type === "content" ? contentText(item.content) : JSON.stringify(item);
    const lines = text.split("\n").length;
    return el("details", {class: "tool-output", open: lines <= OPEN_OUTPUT_LINES},
      el("summary", {text: `Output (${plural(lines, "line")})`}),
      el("pre", {class: "tool-output-text", text}));
  }

  // ---- diffs ------------------------------------------------------------------------------------

  function splitLines(text) {
    if (!text) return [];
    const lines = String(text).split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    return lines;
  }

  /* Line diff of a and b: [{op: " " | "-" | "+", text}], by LCS over what lies between the common
   * prefix and suffix (all-removed-then-all-added when that middle is too large to tabulate). */
  function diffLines(a, b) {
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
  function hunks(ops) {
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

  function prefixed(side, path) {
    return path.startsWith("/") ? path : `${side}/${path}`;
  }

  function renderDiff(s, item) {
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

  // ---- permission prompts -----------------------------------------------------------------------

  /* The question goes into the tool call's card (made from the question when the tool_call
   * notification has not come yet: it does not end the agent message being streamed). */
  function askPermission(params) {
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
      const finish = (outcome, label) => {
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
        actions.append(el("span", {class: "permission-answer", text: label}));
        resolve({outcome});
        renderSessions();
        renderTitle();
      };
      entry.resolve = finish;
      card.append(el("div", {class: "permission-head"},
        el("span", {class: "permission-label", text: "Permission needed:"}),
        el("span", {class: "permission-title", text: call.title || "a tool call"})));
      if (asked.length) {
        card.append(el("ul", {class: "permission-reasons"},
          ...asked.map((p) => el("li", {text: String(p.text || "")}))));
      }
      const diffs = (Array.isArray(call.content) ? call.content : []).filter((c) => c && c.type === "diff");
      for (const d of diffs) card.append(renderDiff(s, d));
      if (!diffs.length && call.rawInput !== undefined && call.rawInput !== null) {
        card.append(el("pre", {class: "permission-input", text: JSON.stringify(call.rawInput, null, 2)}));
      }
      for (const option of options) {
        const kind = String(option.kind || "");
        actions.append(el("button", {
          type: "button", class: kind.startsWith("allow") ? "allow" : "reject",
          "data-option-id": option.optionId, "data-kind": kind,
          onclick: () => finish({outcome: "selected", optionId: option.optionId}, `You chose: ${option.name || option.optionId}`),
        }, option.name || option.optionId));
      }
      card.append(actions);
      s.permissions.add(entry);
      tool.card.classList.add("awaiting");
      tool.card.classList.remove("collapsed");
      tool.card.append(card);
      if (current === s) scrollToEnd();  // a question is worth the jump
      renderSessions();
      renderTitle();
      if (current === s) {
        const first = actions.querySelector("button.allow");
        if (first && document.activeElement === document.body) first.focus();
      }
    });
  }

  function settlePermissions(s, why) {
    for (const entry of Array.from(s.permissions)) entry.resolve({outcome: "cancelled"}, `Cancelled (${why})`);
  }

  // ---- turns ------------------------------------------------------------------------------------

  let sending = false;

  async function sendPrompt() {
    const box = $("#prompt");
    const text = box.value;
    if (!text.trim() || sending || (current && current.running)) return;
    if (!conn.ready) {
      showError("Not connected to the server.", !conn.ws);
      return;
    }
    const wantedMode = $("#mode").value;
    sending = true;
    updateControls();
    let s;
    try {
      s = await ensureSession();
      await s.modePending;
    } catch (err) {
      showError(`Could not start a session: ${err.message}`);
      sending = false;
      updateControls();
      return;
    }
    if (s.mode && wantedMode && s.mode !== wantedMode) {  // never run in a mode the person did not pick
      showError(`Not sent: the session is in ${s.mode} mode, not ${wantedMode}.`);
      sending = false;
      updateControls();
      return;
    }
    box.value = "";
    autosize();
    s.last = null;
    appendChunk(s, "user", text);
    s.last = null;
    if (!s.title) {
      s.title = text.split(/\s+/).join(" ").trim().slice(0, 80);
      renderTitle();
    }
    s.running = true;
    sending = false;
    const started = Date.now();
    updateControls();
    renderSessions();
    scrollToEnd();
    try {
      const result = await request("session/prompt", {sessionId: s.id, prompt: [{type: "text", text}]});
      endTurn(s, result || {}, (Date.now() - started) / 1000);
    } catch (err) {
      appendNote(s, "error", `The turn failed: ${err.message}`);
      showError(`session/prompt failed: ${err.message}`, !conn.ready && !conn.ws);
    } finally {
      s.running = false;
      settlePermissions(s, "the turn ended");
      updateControls();
      refreshSessions();
    }
  }

  function endTurn(s, result, seconds) {
    const meta = (result._meta && result._meta.composer) || {};
    const reason = result.stopReason || "end_turn";
    const bits = [];
    if (reason !== "end_turn") bits.push(`Stopped: ${reason.replace(/_/g, " ")}`);
    else bits.push("Done");
    if (typeof meta.steps === "number") bits.push(plural(meta.steps, "step"));
    if (typeof meta.toolCalls === "number") bits.push(plural(meta.toolCalls, "tool call"));
    bits.push(`${seconds.toFixed(1)} s`);
    appendNote(s, reason === "end_turn" ? "turn-end" : "turn-end stopped", bits.join(" \u00B7 "),
      {"data-stop-reason": reason});
    if (meta.checkpoint) s.checkpoint = meta.checkpoint;
  }

  function cancelTurn() {
    const s = current;
    if (!s || !s.running) return;
    notify("session/cancel", {sessionId: s.id});
    settlePermissions(s, "you cancelled the turn");
    $("#turn-status").textContent = "Cancelling...";
  }

  async function undoLastTurn() {
    const s = current;
    if (!s || !s.attached || s.running) return;
    const button = $("#undo");
    button.disabled = true;
    try {
      const result = await request("composer/rewind", {sessionId: s.id});
      const changes = (result && result.changes) || {};
      const parts = [];
      for (const key of ["modified", "added", "deleted"]) {
        const v = changes[key];
        if (Array.isArray(v) && v.length) parts.push(`${key}: ${v.map((p) => displayPath(s, p)).join(", ")}`);
        else if (typeof v === "number" && v) parts.push(`${v} ${key}`);
      }
      const what = parts.length ? parts.join("; ") : "no files changed";
      const backup = result && result.backupCheckpointId ? ` (backup checkpoint ${result.backupCheckpointId})` : "";
      appendNote(s, "rewind", `Undid the last turn's changes: restored checkpoint ${result && result.checkpointId}; ${what}${backup}.`);
      toast("Restored the files to before the last turn.", "info");
    } catch (err) {
      showError(`Undo failed: ${err.message}`);
    } finally {
      updateControls();
    }
  }

  // ---- chrome: title, plan, usage, controls -----------------------------------------------------

  function renderTitle() {
    const title = current ? (current.title || "Untitled session") : "New session";
    $("#session-title").textContent = title;
    let waiting = 0;
    for (const s of sessions.values()) waiting += s.permissions.size;
    document.title = `${waiting ? "(!) " : ""}${title} - Composer`;
  }

  function renderPlan() {
    const entries = (current && current.plan) || [];
    $("#plan").hidden = !entries.length;
    const done = entries.filter((e) => e.status === "completed").length;
    $("#plan-progress").textContent = entries.length ? `${done}/${entries.length} done` : "";
    $("#plan-entries").replaceChildren(...entries.map((e) => el("li", {
      class: "plan-entry", "data-status": e.status || "pending", "data-priority": e.priority || "medium",
    }, el("span", {class: "plan-mark", "aria-hidden": "true"}), el("span", {class: "plan-text", text: String(e.content || "")}),
    e.priority === "high" ? el("span", {class: "badge high", text: "high"}) : null)));
  }

  function renderUsage() {
    const u = current && current.usage;
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

  function renderChrome() {
    renderTitle();
    renderModes();
    renderPlan();
    renderUsage();
    renderSessions();
    updateControls();
  }

  function updateControls() {
    const s = current;
    const running = Boolean(s && s.running);
    const busy = running || sending || Boolean(s && s.loading);
    $("#send").disabled = !conn.ready || busy;
    $("#send").hidden = running;
    $("#cancel").hidden = !running;
    $("#cancel").disabled = !conn.ready;
    $("#mode").disabled = !conn.ready || busy;
    $("#undo").disabled = !conn.ready || !s || !s.attached || busy;
    $("#new-session").disabled = !conn.ready;
    $("#app").dataset.running = running ? "true" : "false";
    const status = $("#turn-status");
    if (running) status.textContent = s.permissions.size ? "Waiting for your answer..." : "Composer is working...";
    else if (sending) status.textContent = "Starting...";
    else if (s && s.loading) status.textContent = "Loading...";
    else status.textContent = "";
  }

  function autosize() {
    const box = $("#prompt");
    box.style.height = "auto";
    box.style.height = `${Math.min(box.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
  }

  // ---- wiring -----------------------------------------------------------------------------------

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
      } else if (event.key === "Escape" && current && current.running) {
        event.preventDefault();
        cancelTurn();
      }
    });
    box.addEventListener("input", autosize);
    $("#cancel").addEventListener("click", cancelTurn);
    $("#mode").addEventListener("change", onModeChange);
    $("#undo").addEventListener("click", undoLastTurn);
    $("#new-session").addEventListener("click", () => {
      hideError();
      showDraft();
    });
    $("#refresh-sessions").addEventListener("click", refreshSessions);
    $("#reconnect").addEventListener("click", reconnect);
    $("#error-close").addEventListener("click", hideError);
    $("#toggle-sidebar").addEventListener("click", () => $("#app").classList.toggle("sidebar-hidden"));
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && current && current.running && event.target !== box) cancelTurn();
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
})();
