/* What the chat webview asks for, turned into session-client calls. Messages from the webview are
 * checked field by field first (`parseFromView`): a malformed one is dropped, never half-done.
 *
 *   webview.onDidReceiveMessage((m) => handleViewMessage(m, client, host));
 *
 * The editor-only actions (diff editor, opening a file, the session picker) go to a `ViewHost`,
 * which the extension implements with the VS Code API. No `vscode` import.
 */

import { currentSession } from './chatState';
import { errorMessage, SessionClient } from './sessionClient';
import type { DiffContent } from './types';
import type { FromView } from './view';
import { findDiff, findPermission } from './viewModel';

export interface ViewHost {
  /** The webview (re)loaded: send it everything. */
  resync(): void;
  openDiff(diff: DiffContent, title: string): void | Promise<void>;
  /** Opens a revisable question's proposal with an editable new side (reopening keeps the edits). */
  editProposal(requestId: number, diff: DiffContent): void | Promise<void>;
  openLocation(path: string, line?: number): void | Promise<void>;
  pickSession(): void | Promise<void>;
  showError(message: string): void;
}

const isString = (v: unknown): v is string => typeof v === 'string';

export function parseFromView(raw: unknown): FromView | null {
  if (!raw || typeof raw !== 'object') return null;
  const m = raw as Record<string, unknown>;
  switch (m.type) {
    case 'ready': case 'cancel': case 'newChat': case 'history': case 'undo':
      return { type: m.type };
    case 'send':
      return isString(m.text) ? { type: 'send', text: m.text } : null;
    case 'setMode':
      return isString(m.modeId) ? { type: 'setMode', modeId: m.modeId } : null;
    case 'answer':
      return Number.isInteger(m.requestId) && isString(m.optionId)
        ? { type: 'answer', requestId: m.requestId as number, optionId: m.optionId } : null;
    case 'openDiff':
      return isString(m.itemId) && Number.isInteger(m.index) && (m.source === 'permission' || m.source === 'output')
        ? { type: 'openDiff', itemId: m.itemId, index: m.index as number, source: m.source } : null;
    case 'openLocation':
      return isString(m.path) && (m.line === undefined || Number.isInteger(m.line))
        ? { type: 'openLocation', path: m.path, line: m.line as number | undefined } : null;
    case 'reviewChanges': case 'keepAll':
      return isString(m.itemId) ? { type: m.type, itemId: m.itemId } : null;
    case 'reviewHunk':
      return isString(m.itemId) && isString(m.path) && Number.isInteger(m.index) && (m.verdict === 'undo' || m.verdict === 'keep')
        ? { type: 'reviewHunk', itemId: m.itemId, path: m.path, index: m.index as number, verdict: m.verdict } : null;
    default:
      return null;
  }
}

/** Does what the webview message asks; failures are shown (host.showError), never thrown. */
export async function handleViewMessage(raw: unknown, client: SessionClient, host: ViewHost): Promise<void> {
  const m = parseFromView(raw);
  if (!m) return;
  try {
    await run(m, client, host);
  } catch (err) {
    // a failed turn is already in the transcript; anything else is shown here
    if (m.type !== 'send' || !currentSession(client.state)?.error) host.showError(errorMessage(err));
  }
}

async function run(m: FromView, client: SessionClient, host: ViewHost): Promise<void> {
  switch (m.type) {
    case 'ready':
      return host.resync();
    case 'send': {
      const text = m.text.trim();
      const s = currentSession(client.state);
      if (!text || s?.running || s?.loading) return;
      await client.prompt(text);
      return;
    }
    case 'cancel':
      return client.cancel();
    case 'newChat':
      return client.newChat();
    case 'history':
      return host.pickSession();
    case 'undo':
      await client.rewind();
      return;
    case 'setMode':
      if (!client.state.modes.some((mode) => mode.id === m.modeId)) return;
      return client.setMode(m.modeId);
    case 'answer':
      client.answerPermission(m.requestId, m.optionId);
      return;
    case 'openDiff': {
      const diff = findDiff(client.state, m.itemId, m.index, m.source);
      if (!diff) return;
      const question = m.source === 'permission' ? findPermission(client.state, m.itemId) : null;
      // only a waiting revisable question can still take the person's text; the rest stay read-only
      if (question?.revisable && !question.answer) await host.editProposal(question.requestId, diff);
      else await host.openDiff(diff, m.source === 'permission' ? 'proposed' : 'edit');
      return;
    }
    case 'openLocation':
      return host.openLocation(m.path, m.line);
    case 'reviewChanges':
      return onReviewCard(client, m.itemId, () => client.reviewChanges(m.itemId));
    case 'reviewHunk':
      return onReviewCard(client, m.itemId, () => client.reviewHunks(m.itemId, m.verdict, [{ path: m.path, index: m.index }]));
    case 'keepAll':
      return onReviewCard(client, m.itemId, () => client.keepAll(m.itemId));
  }
}

/** Runs a review request; what fails is shown on its card (ReviewItem.error), else thrown. A click
 * while a request about the card is under way (busy) is dropped. The card is looked for in every
 * session: the person may have switched chats while the request ran (item ids are unique). */
async function onReviewCard(client: SessionClient, itemId: string, request: () => Promise<unknown>): Promise<void> {
  try {
    await request();
  } catch (err) {
    const item = Object.values(client.state.sessions).flatMap((s) => s.items).find((i) => i.id === itemId);
    if (item?.type === 'review' && (item.error || item.busy)) return;
    throw err;
  }
}
