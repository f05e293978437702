/* The composer-lsp command line the extension starts, from its settings (no `vscode` import, so
 * tests check it in Node).
 *
 *   serverCommand(settings, ['/usr/bin/python3'], '/repo')
 *   // {command: '/usr/bin/python3', args: ['-m', 'server', '--stdio', '--workspace', '/repo', ...]}
 */

import type { ModeId } from '../protocol/types';

export interface ISettings {
  /** Python executable (and leading arguments) that runs `-m server`; empty: the Python
   * extension's interpreter, else `python`. */
  interpreter: string[];
  /** A composer-lsp executable (and leading arguments) run instead of `<interpreter> -m server`. */
  path: string[];
  /** More composer-lsp arguments. */
  args: string[];
  endpoint: string;
  model: string;
  logDir: string;
  logLevel: string;
  /** The mode new sessions start in (sent as initializationOptions.mode). */
  mode: ModeId;
}

export const DEFAULT_SETTINGS: ISettings = {
  interpreter: [], path: [], args: [], endpoint: '', model: '', logDir: '', logLevel: 'WARNING', mode: 'agent',
};

export interface ServerCommand {
  command: string;
  args: string[];
}

export function serverCommand(settings: ISettings, interpreter: string[], workspace: string): ServerCommand {
  const options = ['--stdio', '--workspace', workspace];
  if (settings.endpoint) options.push('--endpoint', settings.endpoint);
  if (settings.model) options.push('--model', settings.model);
  if (settings.logDir) options.push('--log-dir', settings.logDir);
  if (settings.logLevel) options.push('--log-level', settings.logLevel);
  options.push(...settings.args);
  if (settings.path.length) return { command: settings.path[0], args: [...settings.path.slice(1), ...options] };
  const python = interpreter.length ? interpreter : ['python'];
  return { command: python[0], args: [...python.slice(1), '-m', 'server', ...options] };
}

/** What goes to the server as initializationOptions: the settings, minus nothing secret (an API key
 * is never a setting; composer-lsp reads COMPOSER_API_KEY from the environment). */
export function initializationOptions(settings: ISettings): Record<string, unknown> {
  return { mode: settings.mode, endpoint: settings.endpoint || null, model: settings.model || null,
    logDir: settings.logDir || null, logLevel: settings.logLevel };
}
