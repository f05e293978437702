// vitest: unit tests of the protocol layer and the webview painter, the extension's wiring on a
// stubbed `vscode` (test/extension.test.ts), and the integration test against the real composer-lsp
// (test/integration.test.ts). Run: npm test
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // `vscode` exists only inside VS Code: tests get a small stub of the API
    alias: [{ find: /^vscode$/, replacement: fileURLToPath(new URL('./test/support/vscodeStub.ts', import.meta.url)) }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // two CPUs are shared here; the integration tests start Python processes
    maxWorkers: 2,
  },
});
