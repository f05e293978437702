/* Composer web chat page: "Review changes", keeping or undoing the last turn's changes hunk by
 * hunk. composer/turnChanges lists the changes since the checkpoint taken before the turn's first
 * change, per file, in hunks ({index, header, lines: " ctx" / "-old" / "+new", digest});
 * composer/reviewHunks undoes the picked hunks (every other line stays as it is now) or records
 * the person's "keep". After an undo the page lists again: indices and digests shift. A file
 * that changed since its listing is refused, untouched (its keeps too: only the picks the answer's
 * `kept` names show as kept), with a reason shown at the file and a new listing; binary
 * and too-large files come without hunks, and only "Undo last turn" (composer/rewind) restores
 * them. The panel (#review in index.html) belongs to one session and closes when another is
 * shown, a turn starts, or the whole turn is undone. The button shows whenever "Undo last turn"
 * can be used, not only after a turn this page saw end (a reloaded page never learns the
 * checkpoint): composer/turnChanges knows, and its error (no checkpoint) shows in the panel. */

import {$, el, plural, showError} from "./dom.js";
import {updateControls} from "./chrome.js";
import {conn, request} from "./rpc.js";
import {state} from "./state.js";
import {appendNote} from "./transcript.js";

/* What the panel shows: null while closed. `kept` holds hunkKey()s the server kept (they stay
 * kept through a re-listing); `refused` is path -> {label, why} ("Not undone" / "Not kept" and
 * the server's reason), until a later action on that file. */
let review = null;

/* A hunk's identity across listings: its file, its checkpoint side (undoing another hunk never
 * moves that) and its lines. Its digest and index shift when an earlier hunk is undone. */
function hunkKey(path, hunk) {
  const oldSide = String(hunk.header || "").split(" +")[0];
  return `${path}\0${oldSide}\0${(hunk.lines || []).join("\n")}`;
}

function pick(path, hunk) {
  return {path, index: hunk.index, digest: hunk.digest};
}

function blocked() {
  const s = state.current;
  return !review || !conn.ready || !s || s.id !== review.sessionId || !s.attached || s.running ||
    state.sending || Boolean(s.loading) || review.busy;
}

/* The "Review changes" button and the panel follow the current session (chrome.js updateControls
 * calls this): shown, and usable, as "Undo last turn" is: for a session the page is attached to
 * (or whose turn it saw change something), whether or not this page saw that turn end. */
export function renderReviewControls() {
  const s = state.current;
  const button = $("#review-changes");
  const busy = Boolean(s && (s.running || s.loading)) || state.sending;
  button.hidden = !s || !(s.attached || s.checkpoint);
  button.disabled = !conn.ready || !s || !s.attached || busy;
  if (review && (!s || s.id !== review.sessionId)) closeReview();
  button.setAttribute("aria-expanded", review ? "true" : "false");
  const off = blocked();
  for (const b of $("#review").querySelectorAll("button[data-review-action]")) {
    b.disabled = off || b.dataset.kept === "true";
  }
}

export function toggleReview() {
  if (review) closeReview(true);
  else openReview();
}

export function closeReview(returnFocus) {
  if (!review) return;
  review = null;
  $("#review").hidden = true;
  $("#review-files").replaceChildren();
  $("#review-status").textContent = "";
  $("#review-changes").setAttribute("aria-expanded", "false");
  if (returnFocus && !$("#review-changes").hidden) $("#review-changes").focus();
}

async function openReview() {
  const s = state.current;
  if (!s || !s.attached || s.running) return;
  review = {sessionId: s.id, checkpointId: null, files: [], kept: new Set(), refused: {}, busy: false, error: null};
  $("#review").hidden = false;
  $("#review").dataset.sessionId = s.id;
  $("#review-status").textContent = "Listing the changes...";
  updateControls();
  await list();
  $("#review-title").focus();
}

/* Asks for the current listing and draws it; false when the panel closed meanwhile or it failed. */
async function list() {
  const mine = review;
  mine.busy = true;
  updateControls();
  try {
    const result = await request("composer/turnChanges", {sessionId: mine.sessionId});
    if (review !== mine) return false;
    mine.checkpointId = (result && result.checkpointId) || null;
    mine.files = Array.isArray(result && result.files) ? result.files : [];
    mine.error = null;
    return true;
  } catch (err) {
    if (review !== mine) return false;
    mine.files = [];
    mine.error = err.message;
    return false;
  } finally {
    if (review === mine) {
      mine.busy = false;
      render();
    }
  }
}

function render() {
  const files = review.files;
  const pending = [];
  let total = 0;
  for (const f of files) {
    for (const h of f.hunks || []) {
      total++;
      if (!review.kept.has(hunkKey(f.path, h))) pending.push(h);
    }
  }
  $("#review-keep-all").hidden = !pending.length;
  let status;
  if (review.error) status = `Could not list the changes: ${review.error}`;
  else if (!files.length) status = "No changes left since the last turn's checkpoint.";
  else if (!total) status = plural(files.length, "file") + " changed, none shown in hunks.";
  else if (!pending.length) status = `All ${plural(total, "change")} kept.`;
  else status = `${plural(pending.length, "change")} to review in ${plural(files.length, "file")}` +
    (pending.length < total ? `, ${total - pending.length} kept.` : ".");
  $("#review-status").textContent = status;
  $("#review-files").replaceChildren(...files.map(renderFile));
  renderReviewControls();
}

const STATUS_TAGS = {added: "new file", deleted: "deleted", modified: "modified"};

function renderFile(f) {
  const path = String(f.path || "");
  const hunks = Array.isArray(f.hunks) ? f.hunks : [];
  const added = hunks.reduce((n, h) => n + h.lines.filter((l) => l.startsWith("+")).length, 0);
  const removed = hunks.reduce((n, h) => n + h.lines.filter((l) => l.startsWith("-")).length, 0);
  const head = el("h3", {class: "review-file-head"},
    el("span", {class: "diff-path", text: path}),
    el("span", {class: "diff-tag", "data-status": f.status || "modified", text: ` ${STATUS_TAGS[f.status] || f.status || ""}`}),
    f.binary ? null : el("span", {class: "diff-stat-add", text: ` +${added}`}),
    f.binary ? null : el("span", {class: "diff-stat-del", text: ` -${removed}`}));
  const node = el("section", {class: "review-file", "data-path": path, "data-status": f.status || "",
    "data-testid": "review-file", "aria-label": path}, head);
  const refusal = review.refused[path];
  if (refusal) {
    node.append(el("p", {class: "review-refused", role: "alert", "data-testid": "review-refused"},
      el("strong", {text: `${refusal.label}: `}), refusal.why, " (the list below is the new one)."));
  }
  if (f.binary) {
    node.append(el("p", {class: "review-note", "data-testid": "review-binary",
      text: "Binary or too large to show hunk by hunk; only \u201CUndo last turn\u201D restores this file."}));
  }
  hunks.forEach((h, i) => node.append(renderHunk(path, h, i)));
  return node;
}

function renderHunk(path, hunk, position) {
  const n = position + 1;
  const kept = review.kept.has(hunkKey(path, hunk));
  const pre = el("pre", {class: "diff"}, el("span", {class: "diff-line diff-hunk", text: hunk.header}));
  for (const raw of hunk.lines || []) {
    const line = String(raw).replace(/\r?\n$/, "");
    const cls = line.startsWith("+") ? "diff-add" : line.startsWith("-") ? "diff-del" : "diff-ctx";
    pre.append(el("span", {class: `diff-line ${cls}`, text: line}));
  }
  const flag = kept ? "true" : "false";
  const actions = el("div", {class: "review-actions"},
    kept ? el("span", {class: "review-kept", "data-testid": "review-kept", text: "Kept"}) : null,
    el("button", {type: "button", class: "review-undo", "data-review-action": "undo", "data-kept": flag,
      "aria-label": `Undo change ${n} in ${path}`, title: "Put these lines back as they were before the turn",
      text: "Undo", onclick: () => undoHunk(path, hunk, position)}),
    el("button", {type: "button", class: "review-keep", "data-review-action": "keep", "data-kept": flag,
      "aria-label": `Keep change ${n} in ${path}`, title: "Keep this change",
      text: "Keep", onclick: () => keepHunks([[path, hunk]], position)}));
  return el("div", {class: "review-hunk", role: "group", "aria-label": `Change ${n} in ${path}`,
    "data-index": hunk.index, "data-kept": flag, "data-testid": "review-hunk"}, pre, actions);
}

async function undoHunk(path, hunk, position) {
  const mine = review;
  if (blocked()) return;
  mine.busy = true;
  updateControls();
  const s = state.current;
  let what = `change ${position + 1} in ${path}`;
  try {
    const params = {sessionId: mine.sessionId, undo: [pick(path, hunk)]};
    if (mine.checkpointId) params.checkpointId = mine.checkpointId;
    const result = (await request("composer/reviewHunks", params)) || {};
    const refused = result.refused || {};
    delete mine.refused[path];
    if (refused[path]) {
      mine.refused[path] = {label: "Not undone", why: String(refused[path])};
      what = `Did not undo ${what}`;  // the reason shows at the file
    } else {
      const backup = result.backupCheckpointId ? ` (backup checkpoint ${result.backupCheckpointId})` : "";
      what = `Undid ${what}`;
      if (s && s.id === mine.sessionId) appendNote(s, "rewind", `${what}${backup}.`);
    }
  } catch (err) {
    what = `Undo failed: ${err.message}`;
    showError(what);
  }
  if (review !== mine) return;
  mine.busy = false;
  await list();  // indices and digests shift after an undo: always list again
  if (review !== mine) return;
  $("#review-status").textContent = `${what}. ${$("#review-status").textContent}`;
  focusAfter(path, position);
}

/* Only the picks the answer's `kept` names (by path and index) show as kept: a file changed
 * since its listing is refused whole, its reason shown at the file, and the page lists again. */
async function keepHunks(picked, position) {
  const mine = review;
  if (blocked() || !picked.length) return;
  mine.busy = true;
  updateControls();
  let missed = 0;
  try {
    const params = {sessionId: mine.sessionId, keep: picked.map(([path, h]) => pick(path, h))};
    if (mine.checkpointId) params.checkpointId = mine.checkpointId;
    const result = (await request("composer/reviewHunks", params)) || {};
    if (review !== mine) return;
    const refused = result.refused || {};
    const kept = new Set((Array.isArray(result.kept) ? result.kept : []).map((k) => `${k.path}\0${k.index}`));
    for (const [path] of picked) delete mine.refused[path];
    for (const [path, h] of picked) {
      if (refused[path]) mine.refused[path] = {label: "Not kept", why: String(refused[path])};
      if (!refused[path] && kept.has(`${path}\0${h.index}`)) mine.kept.add(hunkKey(path, h));
      else missed++;
    }
  } catch (err) {
    showError(`Keep failed: ${err.message}`);
  }
  if (review !== mine) return;
  mine.busy = false;
  const one = picked.length === 1 ? picked[0][0] : null;
  if (!missed) {
    render();
  } else {
    // something was refused: the file moved on since its listing, so list it again
    const what = one === null ? plural(missed, "change") : `change ${position + 1} in ${one}`;
    await list();
    if (review !== mine) return;
    $("#review-status").textContent = `Did not keep ${what}. ${$("#review-status").textContent}`;
  }
  focusAfter(one, position);
}

export function keepAll() {
  if (!review) return;
  const picked = [];
  for (const f of review.files) {
    for (const h of f.hunks || []) {
      if (!review.kept.has(hunkKey(f.path, h))) picked.push([f.path, h]);
    }
  }
  keepHunks(picked, 0);
}

/* Focus goes to the next change still to review in the file (the one now in the acted-on place
 * or after it), else the first anywhere, else the panel's heading: never lost to the page. */
function focusAfter(path, position) {
  const buttons = [...$("#review-files").querySelectorAll("button.review-undo")].filter((b) => !b.disabled);
  const inFile = path === null ? [] : buttons.filter((b) => b.closest(".review-file").dataset.path === path);
  const later = inFile.filter((b) => {
    const hunks = [...b.closest(".review-file").querySelectorAll(".review-hunk")];
    return hunks.indexOf(b.closest(".review-hunk")) >= position;
  });
  const target = later[0] || inFile[0] || buttons[0] || $("#review-title");
  target.focus();
}
