/* Composer web chat page: turns. Sending a prompt (creating the session first when the page
 * shows a draft, in the mode picked for it), the turn's end note, cancel, and "Undo last turn"
 * (composer/rewind), then "Forget the turn too" (conversation: true); "Review changes" is
 * review.js. */

import {$, el, plural, showError, toast} from "./dom.js";
import {autosize, renderTitle, updateControls} from "./chrome.js";
import {settlePermissions} from "./permissions.js";
import {closeReview} from "./review.js";
import {conn, notify, request} from "./rpc.js";
import {ensureSession, refreshSessions, renderSessions} from "./sessions.js";
import {state} from "./state.js";
import {displayPath} from "./tools.js";
import {appendChunk, appendNote, scrollToEnd} from "./transcript.js";

export async function sendPrompt() {
  const box = $("#prompt");
  const text = box.value;
  if (!text.trim() || state.sending || (state.current && state.current.running)) return;
  if (!conn.ready) {
    showError("Not connected to the server.", !conn.ws);
    return;
  }
  // a new session starts in the server's default mode unless the person picked one
  const wantedMode = state.current ? $("#mode").value : state.draftMode;
  state.sending = true;
  updateControls();
  let s;
  try {
    s = await ensureSession();
    await s.modePending;
  } catch (err) {
    showError(`Could not start a session: ${err.message}`);
    state.sending = false;
    updateControls();
    return;
  }
  if (s.mode && wantedMode && s.mode !== wantedMode) {  // never run in a mode the person did not pick
    showError(`Not sent: the session is in ${s.mode} mode, not ${wantedMode}.`);
    state.sending = false;
    updateControls();
    return;
  }
  closeReview();  // the listing is about the turn before this one
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
  state.sending = false;
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
  s.checkpoint = meta.checkpoint || null;  // non-null when the turn changed something: "Review changes"
}

export function cancelTurn() {
  const s = state.current;
  if (!s || !s.running) return;
  notify("session/cancel", {sessionId: s.id});
  settlePermissions(s, "you cancelled the turn");
  $("#turn-status").textContent = "Cancelling...";
}

export async function undoLastTurn() {
  const s = state.current;
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
    const note = appendNote(s, "rewind", `Undid the last turn's changes: restored checkpoint ${result && result.checkpointId}; ${what}${backup}. `);
    note.append(el("button", {type: "button", class: "forget", "data-testid": "forget-turn",
      title: "Take the turn out of the conversation too: Composer goes on as if it had not happened",
      onclick: (event) => forgetLastTurn(s, result.checkpointId, event.currentTarget)}, "Forget the turn too"));
    closeReview();
    toast("Restored the files to before the last turn.", "info");
  } catch (err) {
    showError(`Undo failed: ${err.message}`);
  } finally {
    updateControls();
  }
}

/** After an undo: composer/rewind to the same checkpoint, with the turn taken out of the
 * conversation (refused by the server once a later turn ran). */
async function forgetLastTurn(s, checkpointId, button) {
  if (s.running) return;
  button.disabled = true;
  try {
    await request("composer/rewind", {sessionId: s.id, checkpointId, conversation: true});
    button.replaceWith("Composer forgot the turn: the next prompt goes on from before it.");
  } catch (err) {
    button.disabled = false;
    showError(`Forgetting the turn failed: ${err.message}`);
  }
}
