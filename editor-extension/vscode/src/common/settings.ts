/* The extension's settings (contributes.configuration in package.json, namespace "composer"),
 * read per workspace folder as the Python tools extension template does.
 */

import { ConfigurationChangeEvent, workspace, WorkspaceFolder } from 'vscode';
import { DEFAULT_SETTINGS, ISettings } from './command';

export const NAMESPACE = 'composer';

/** Settings whose change restarts the server (composer.trace.server is the language client's own). */
const SERVER_SETTINGS = ['interpreter', 'path', 'args', 'endpoint', 'model', 'logDir', 'logLevel', 'mode'];

export function getWorkspaceSettings(folder?: WorkspaceFolder): ISettings {
  const config = workspace.getConfiguration(NAMESPACE, folder?.uri);
  const d = DEFAULT_SETTINGS;
  return {
    interpreter: config.get<string[]>('interpreter') ?? d.interpreter,
    path: config.get<string[]>('path') ?? d.path,
    args: config.get<string[]>('args') ?? d.args,
    endpoint: config.get<string>('endpoint') ?? d.endpoint,
    model: config.get<string>('model') ?? d.model,
    logDir: resolveVariables(config.get<string>('logDir') ?? d.logDir, folder),
    logLevel: config.get<string>('logLevel') ?? d.logLevel,
    mode: config.get<string>('mode') ?? d.mode,
  };
}

/** ${workspaceFolder} and ~ in path settings. */
function resolveVariables(value: string, folder?: WorkspaceFolder): string {
  let out = value;
  if (folder) out = out.replace(/\$\{workspaceFolder\}/g, folder.uri.fsPath);
  const home = process.env.HOME || process.env.USERPROFILE;
  if (home && (out === '~' || out.startsWith('~/'))) out = home + out.slice(1);
  return out;
}

export function checkIfConfigurationChanged(e: ConfigurationChangeEvent): boolean {
  return SERVER_SETTINGS.some((s) => e.affectsConfiguration(`${NAMESPACE}.${s}`));
}

/** The folder composer-lsp works in: the first workspace folder (none: nothing to serve). */
export function getProjectRoot(): WorkspaceFolder | undefined {
  return workspace.workspaceFolders?.[0];
}
