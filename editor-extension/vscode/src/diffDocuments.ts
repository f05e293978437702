/* Diffs in VS Code's diff editor: the two sides of a proposed or finished edit are served as
 * read-only virtual documents (scheme `composer-diff`) and opened with `vscode.diff`. A revisable
 * proposal's editable side is not served here but by proposalDocuments.ts; its read-only side is.
 */

import * as path from 'path';
import * as vscode from 'vscode';
import type { DiffContent } from './protocol/types';

export const DIFF_SCHEME = 'composer-diff';
const KEEP = 50;

export class DiffDocuments implements vscode.TextDocumentContentProvider {
  private texts = new Map<string, string>();
  private next = 1;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.path) ?? '';
  }

  private put(side: string, file: string, text: string): vscode.Uri {
    const key = `/${this.next}/${side}/${file}`;
    this.texts.set(key, text);
    while (this.texts.size > KEEP * 2) this.texts.delete(this.texts.keys().next().value as string);
    return vscode.Uri.from({ scheme: DIFF_SCHEME, path: key });
  }

  /** The read-only "before" side of `diff` alone: the file as it is. */
  before(diff: DiffContent): vscode.Uri {
    const left = this.put('before', path.basename(diff.path), diff.oldText ?? '');
    this.next++;
    return left;
  }

  async open(diff: DiffContent, label: string): Promise<void> {
    const file = path.basename(diff.path);
    const left = this.put('before', file, diff.oldText ?? '');
    const right = this.put('after', file, diff.newText);
    this.next++;
    await vscode.commands.executeCommand('vscode.diff', left, right, `${file} (${label} by Composer)`, { preview: true });
  }
}
