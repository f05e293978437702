/* The status bar item: idle / working / waiting for an answer / error, and the sandbox level
 * (a warning when it is weaker than bubblewrap), from the chat state (viewModel.statusOf);
 * clicking it opens the chat.
 */

import * as vscode from 'vscode';
import type { ChatState } from './protocol/chatState';
import { statusOf } from './protocol/viewModel';

export class StatusBar implements vscode.Disposable {
  private item = vscode.window.createStatusBarItem('composer.status', vscode.StatusBarAlignment.Right, 100);

  constructor(focusCommand: string) {
    this.item.name = 'Composer';
    this.item.command = focusCommand;
    this.item.show();
  }

  update(state: ChatState): void {
    const status = statusOf(state);
    this.item.text = status.text;
    this.item.tooltip = status.tooltip;
    this.item.backgroundColor = status.kind === 'error' ? new vscode.ThemeColor('statusBarItem.errorBackground')
      : status.kind === 'waiting' || status.kind === 'unsandboxed' ? new vscode.ThemeColor('statusBarItem.warningBackground')
        : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}
