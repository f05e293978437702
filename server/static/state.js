/* Composer web chat page: the state its modules share (server/static/app.js is the entry point).
 * It lives here, not in app.js, because index.html loads app.js as app.js?token=...: a module
 * importing "./app.js" would get a second copy of it, with state of its own. */

export const sessions = new Map();   // sessionId -> the page's state of a session opened on this connection

export const state = {
  current: null,         // the session shown; null for a new (draft) one, created on first send
  sending: false,        // a prompt is on its way (its session being created or its mode set)
  workspaceRoot: null,   // the server's workspace, as far as the page has seen it
  draftMode: null,       // the mode picked before the session exists; null keeps the server's default
};
