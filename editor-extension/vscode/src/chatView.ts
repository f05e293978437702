/* The chat view: a webview view in Composer's activity bar container. The extension owns the chat
 * state (SessionClient); the webview (src/webview/main.ts) paints what ViewSync sends it and posts
 * back what the person does, which handleViewMessage turns into session requests.
 */

import * as crypto from 'crypto';
import * as vscode from 'vscode';
import type { SessionClient } from './protocol/sessionClient';
import { handleViewMessage, ViewHost } from './protocol/viewMessages';
import { ViewSync } from './protocol/viewModel';

export const CHAT_VIEW_ID = 'composer.chat';
const FRAME_MS = 30; // at most one repaint message per frame of streaming

export class ChatViewProvider implements vscode.WebviewViewProvider, vscode.Disposable {
  private view: vscode.WebviewView | undefined;
  private sync: ViewSync;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private subscriptions: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly client: SessionClient,
    private readonly host: Omit<ViewHost, 'resync'>,
    root: string | null,
  ) {
    this.sync = new ViewSync(root);
    this.subscriptions.push(client.onDidChange(() => this.schedule()));
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const media = vscode.Uri.joinPath(this.extensionUri, 'media');
    const script = vscode.Uri.joinPath(this.extensionUri, 'out', 'webview');
    view.webview.options = { enableScripts: true, localResourceRoots: [media, script] };
    view.webview.html = this.html(view.webview);
    const host: ViewHost = { ...this.host, resync: () => { this.sync.reset(); this.post(); } };
    view.webview.onDidReceiveMessage((m) => handleViewMessage(m, this.client, host), undefined, this.subscriptions);
    view.onDidDispose(() => { this.view = undefined; }, undefined, this.subscriptions);
  }

  /** Shows the chat (opening its container). */
  async reveal(): Promise<void> {
    if (this.view) this.view.show(true);
    else await vscode.commands.executeCommand(`${CHAT_VIEW_ID}.focus`);
  }

  private schedule(): void {
    if (this.timer || !this.view) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.post();
    }, FRAME_MS);
  }

  private post(): void {
    if (!this.view) return;
    void this.view.webview.postMessage(this.sync.next(this.client.state));
  }

  private html(webview: vscode.Webview): string {
    const nonce = crypto.randomBytes(16).toString('base64');
    const css = webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'media', 'chat.css'));
    const js = webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'out', 'webview', 'webview', 'main.js'));
    const csp = [`default-src 'none'`, `style-src ${webview.cspSource}`, `img-src ${webview.cspSource} data:`,
      `font-src ${webview.cspSource}`, `script-src 'nonce-${nonce}'`].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link href="${css}" rel="stylesheet">
<title>Composer</title>
</head>
<body>
<div id="app"></div>
<script type="module" nonce="${nonce}" src="${js}"></script>
</body>
</html>`;
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    for (const s of this.subscriptions.splice(0)) s.dispose();
  }
}
