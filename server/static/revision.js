/* Composer web chat page: editable diff review. A permission question the server marks revisable
 * (params._meta.composer.revisable, one diff in the call's content) lets the person change the
 * proposed edit before allowing it: "Edit" opens the proposal's new text in a textarea, the
 * card's diff follows what they type, and an allow answer carries
 * _meta.composer.revisedText (the whole file as they left it) when it differs from the proposal.
 * permissions.js builds the card around this. */

import {el} from "./dom.js";
import {displayPath, renderDiff} from "./tools.js";

const MIN_ROWS = 3;
const MAX_ROWS = 30;      // longer texts scroll inside the box rather than push the buttons away
const REDIFF_MS = 150;    // a pause in typing before the diff is redrawn: an LCS per key is not free
let editors = 0;          // numbers the textareas, for their labels' `for`

/* The one diff the person may rewrite, or null when the question is not revisable (clients that
 * do not know `revisable` answer as before, and so does this page without it). */
export function revisableDiff(params) {
  const composer = ((params._meta || {}).composer) || {};
  const content = Array.isArray((params.toolCall || {}).content) ? params.toolCall.content : [];
  const diffs = content.filter((c) => c && c.type === "diff");
  if (composer.revisable !== true || diffs.length !== 1 || typeof diffs[0].newText !== "string") return null;
  return diffs[0];
}

/* The editor of `item`, whose diff block is `diffNode` (already in the card): {toggle, panel, meta(),
 * close()}; the card places toggle and panel, sends meta() with an allow answer, close()s it once
 * answered. */
export function revisionEditor(s, item, diffNode) {
  const id = `revision-${++editors}`;
  const box = el("textarea", {id, class: "revision-text", spellcheck: "false", wrap: "off",
    autocapitalize: "off", autocomplete: "off"});
  box.value = item.newText;
  const proposal = box.value;  // as the textarea holds it: it turns CRLF into LF, which is no edit
  const panel = el("div", {class: "revision", id: `${id}-panel`, hidden: true},
    el("label", {class: "revision-label", for: id,
      text: `Your version of ${displayPath(s, item.path)} (allowing writes it as it is here)`}),
    box);
  const toggle = el("button", {type: "button", class: "permission-edit", "aria-expanded": "false",
    "aria-controls": panel.id, text: "Edit"});
  let shown = diffNode;
  let timer = null;
  const redraw = () => {
    clearTimeout(timer);
    timer = null;
    const edited = box.value !== proposal;
    const next = renderDiff(s, Object.assign({}, item, {newText: fileText(box.value, item.newText)}));
    next.open = shown.open;
    if (edited) {
      next.querySelector("summary").append(el("span", {class: "diff-tag revision-tag", text: " edited by you"}));
    }
    shown.replaceWith(next);
    shown = next;
  };
  const open = (yes) => {
    panel.hidden = !yes;
    toggle.setAttribute("aria-expanded", yes ? "true" : "false");
    if (yes) box.focus();
    else toggle.focus();
  };
  toggle.addEventListener("click", () => open(panel.hidden));
  toggle.addEventListener("keydown", (event) => {
    // Escape closed the editor and left focus here; another must not cancel the turn and drop
    // the unsent changes with it (the Cancel button still does, deliberately).
    if (event.key === "Escape" && box.value !== proposal) event.stopPropagation();
  });
  box.addEventListener("input", () => {
    fitRows(box);
    clearTimeout(timer);
    timer = setTimeout(redraw, REDIFF_MS);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    // The page's Escape cancels the running turn, which would throw the person's edit away:
    // here it only closes the editor.
    event.stopPropagation();
    open(false);
  });
  fitRows(box);
  return {
    toggle,
    panel,
    meta: () => (box.value === proposal ? null : {composer: {revisedText: fileText(box.value, item.newText)}}),
    close: () => {
      if (timer !== null) redraw();  // the (collapsed) diff shows what was sent
      box.readOnly = true;
      panel.hidden = true;
      toggle.setAttribute("aria-expanded", "false");
    },
  };
}

/* The textarea's text as the file's: its line breaks back to CRLF when every break of the proposal
 * was one (the server gives the lines the person left alone in a mixed file their own breaks). */
function fileText(value, newText) {
  const allCrlf = newText.includes("\r\n") && !/(^|[^\r])\n/.test(newText);
  return allCrlf ? value.replace(/\n/g, "\r\n") : value;
}

function fitRows(box) {
  const lines = box.value.split("\n").length;
  box.rows = Math.min(MAX_ROWS, Math.max(MIN_ROWS, lines + 1));  // one spare row to type into
}
