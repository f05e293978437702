/* Revisable proposals (the protocol's `_meta.composer.revisable`): the person opens the proposed
 * edit in VS Code's diff editor, changes its right side, and accepts it; SessionClient then asks
 * this (as its ProposalEditor) for their text and sends it as `revisedText`.
 *
 * Why an in-memory FileSystemProvider (scheme `composer-proposal`), when finished diffs use a
 * TextDocumentContentProvider (diffDocuments.ts):
 * - a content provider's documents are read-only in VS Code: nobody can type in them;
 * - an untitled document is editable, but saving it is a Save As dialog to disk, and its name (so
 *   its language) cannot be the proposed file's;
 * - a FileSystemProvider's file is editable, takes its language from its name
 *   (`composer-proposal:/<request>/hello.py`), and saving it (Ctrl+S, or Save when closing it)
 *   only writes into this provider's memory: the server alone writes the workspace's file.
 *
 * When the question is settled its text has been read from the open document (unsaved typing
 * included, TextDocument.getText). The document is then saved into memory before its tabs close:
 * VS Code asks "save changes?" when a changed document is closed, and the API has no way to close
 * one without asking (microsoft/vscode#202366).
 */

import * as path from 'path';
import * as vscode from 'vscode';
import { traceWarn } from './common/logging';
import type { DiffDocuments } from './diffDocuments';
import { errorMessage, ProposalEditor } from './protocol/sessionClient';
import type { DiffContent } from './protocol/types';

export const PROPOSAL_SCHEME = 'composer-proposal';

interface MemoryFile {
  data: Uint8Array;
  mtime: number;
}

interface Proposal {
  uri: vscode.Uri;
  /** The text as VS Code first loaded it, which may differ from the proposal's (line ends of a mixed
   * file are normalized): only a change from it is the person's. Null until it is opened. */
  loaded: string | null;
}

export class ProposalDocuments implements vscode.FileSystemProvider, ProposalEditor {
  private files = new Map<string, MemoryFile>();
  private proposals = new Map<number, Proposal>();
  private changed = new vscode.EventEmitter<vscode.FileChangeEvent[]>();
  readonly onDidChangeFile = this.changed.event;

  constructor(private readonly diffs: DiffDocuments) {}

  /** Opens question `requestId`'s proposal in the diff editor: the file as it is on the left
   * (read-only), the proposed text on the right (editable). Opening it again keeps the edits. */
  async open(requestId: number, diff: DiffContent): Promise<void> {
    const proposal = this.proposals.get(requestId) ?? this.create(requestId, diff);
    const doc = await vscode.workspace.openTextDocument(proposal.uri);
    // settled while the document opened: discard() already closed (and is deleting) its file, and a
    // diff opened now would be an editable tab of a proposal nobody will read
    if (this.proposals.get(requestId) !== proposal) return;
    proposal.loaded ??= doc.getText();
    const title = `${path.basename(diff.path)} (proposed by Composer: edit the right side, then Accept)`;
    // pinned: a preview tab gives way to the next file opened, and the person is about to work here
    await vscode.commands.executeCommand('vscode.diff', this.diffs.before(diff), proposal.uri, title, { preview: false });
  }

  private create(requestId: number, diff: DiffContent): Proposal {
    const uri = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${requestId}/${path.basename(diff.path)}` });
    this.files.set(uri.path, { data: new TextEncoder().encode(diff.newText), mtime: Date.now() });
    const proposal: Proposal = { uri, loaded: null };
    this.proposals.set(requestId, proposal);
    return proposal;
  }

  editedText(requestId: number): string | null {
    const proposal = this.proposals.get(requestId);
    if (!proposal || proposal.loaded === null) return null;
    // a closed document's last saved text is in memory ("Don't Save" dropped the rest)
    const text = this.document(proposal.uri)?.getText() ?? new TextDecoder().decode(this.files.get(proposal.uri.path)?.data);
    return text === proposal.loaded ? null : text;
  }

  discard(requestId: number): void {
    const proposal = this.proposals.get(requestId);
    if (!proposal) return;
    this.proposals.delete(requestId);
    void this.close(proposal.uri)
      .catch((err) => traceWarn(`Could not close the proposal ${proposal.uri.path}: ${errorMessage(err)}`))
      .finally(() => this.files.delete(proposal.uri.path));
  }

  private document(uri: vscode.Uri): vscode.TextDocument | undefined {
    return vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
  }

  private async close(uri: vscode.Uri): Promise<void> {
    const doc = this.document(uri);
    if (doc?.isDirty) await doc.save();
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) => shows(t, uri));
    if (tabs.length) await vscode.window.tabGroups.close(tabs);
  }

  // ---- vscode.FileSystemProvider: the proposals only, flat, in memory --------------------------

  watch(): vscode.Disposable {
    return { dispose: () => undefined };
  }

  stat(uri: vscode.Uri): vscode.FileStat {
    const file = this.file(uri);
    return { type: vscode.FileType.File, ctime: file.mtime, mtime: file.mtime, size: file.data.byteLength };
  }

  readFile(uri: vscode.Uri): Uint8Array {
    return this.file(uri).data;
  }

  writeFile(uri: vscode.Uri, content: Uint8Array): void {
    this.file(uri); // saving a proposal; nothing else can be created here
    this.files.set(uri.path, { data: content, mtime: Date.now() });
    this.changed.fire([{ type: vscode.FileChangeType.Changed, uri }]);
  }

  readDirectory(): [string, vscode.FileType][] {
    return [];
  }

  createDirectory(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(uri);
  }

  delete(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(uri);
  }

  rename(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(uri);
  }

  private file(uri: vscode.Uri): MemoryFile {
    const file = this.files.get(uri.path);
    if (!file) throw vscode.FileSystemError.FileNotFound(uri);
    return file;
  }
}

/** Whether `tab` shows the proposal `uri`: as the diff's right side, or alone. */
function shows(tab: vscode.Tab, uri: vscode.Uri): boolean {
  const key = uri.toString();
  const input = tab.input;
  if (input instanceof vscode.TabInputTextDiff) return input.modified.toString() === key;
  return input instanceof vscode.TabInputText && input.uri.toString() === key;
}
