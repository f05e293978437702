/* Composer web chat page: the JSON-RPC 2.0 client over one WebSocket,
 * ws://HOST:PORT/rpc?token=TOKEN, one message per frame. It sends requests and notifications,
 * matches replies to requests, and answers the server's requests with what the page's handlers
 * return (null for requests the page does not know, so the server never waits). What a server
 * request or notification means for the page is app.js's business: the handlers it gives to
 * openSocket(). */

import {showError} from "./dom.js";

export const TOKEN = new URLSearchParams(location.search).get("token") || "";

class RpcError extends Error {
  constructor(message, code, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

export const conn = {ws: null, nextId: 1, pending: new Map(), ready: false, opened: false};
let handlers = {open() {}, close() {}, request() { return null; }, notification() {}};  // see openSocket()

function rpcUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/rpc?token=${encodeURIComponent(TOKEN)}`;
}

function send(message) {
  if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) throw new RpcError("not connected to the server");
  conn.ws.send(JSON.stringify(Object.assign({jsonrpc: "2.0"}, message)));
}

export function request(method, params) {
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

export function notify(method, params) {
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
    else handlers.notification(message.method, message.params || {});
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

/* Opens the socket (throws if the address is refused outright). `h.open()` runs once it is open,
 * `h.close(event)` once it closes, `h.request(method, params)` answers a server request (a value
 * or a promise) and `h.notification(method, params)` takes a server notification. */
export function openSocket(h) {
  handlers = h;
  conn.opened = false;
  const ws = new WebSocket(rpcUrl());
  conn.ws = ws;
  ws.addEventListener("open", () => {
    if (conn.ws !== ws) return;
    conn.opened = true;
    handlers.open();
  });
  ws.addEventListener("message", (event) => {
    if (conn.ws === ws) onFrame(event.data);
  });
  ws.addEventListener("close", (event) => {
    if (conn.ws === ws) handlers.close(event);
  });
}

/* The socket closed: requests still waiting fail. */
export function socketClosed() {
  conn.ready = false;
  conn.ws = null;
  for (const waiting of conn.pending.values()) waiting.reject(new RpcError("the connection to the server closed"));
  conn.pending.clear();
}

async function serverRequest(message) {
  let reply;
  try {
    let result = await handlers.request(message.method, message.params || {});
    if (result === undefined) result = null;  // a request the page does not know gets null
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
