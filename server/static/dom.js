/* Composer web chat page: small DOM and text helpers, and the page-wide notices (connection
 * state, the error banner, toasts). Text only ever goes in as text nodes, never innerHTML. */

export const $ = (selector) => document.querySelector(selector);

export function el(tag, attrs, ...children) {
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

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export function shortNumber(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${Math.round(n / 1e3)}k`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function when(iso) {
  const t = Date.parse(iso || "");
  if (Number.isNaN(t)) return "";
  const s = (Date.now() - t) / 1000;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  if (s < 7 * 86400) return `${Math.floor(s / 86400)} d ago`;
  return new Date(t).toLocaleDateString();
}

export function contentText(block) {
  if (!block || typeof block !== "object") return "";
  if (block.type === "text") return String(block.text || "");
  if (block.type === "resource_link") return `[${block.name || block.uri}]`;
  if (block.type === "resource") return String((block.resource && block.resource.text) || "[resource]");
  return `[${block.type}]`;
}

// ---- connection state, errors and toasts --------------------------------------------------------

export function setConnection(state, text) {
  const node = $("#connection");
  node.dataset.state = state;
  node.textContent = text;
}

export function showError(text, offerReconnect) {
  $("#error-text").textContent = text;
  $("#reconnect").hidden = !offerReconnect;
  $("#error").hidden = false;
}

export function hideError() {
  $("#error").hidden = true;
  $("#error-text").textContent = "";
}

export function toast(text, kind) {
  if (!text) return;
  const node = el("div", {class: `toast ${kind || "info"}`, role: "status"}, text);
  node.addEventListener("click", () => node.remove());
  $("#toasts").append(node);
  setTimeout(() => node.remove(), kind === "error" ? 12000 : 6000);
}
