-- composer-lsp, Composer's language server: `vim.lsp.enable('composer')` starts it for file
-- buffers under a workspace root. Override fields with `vim.lsp.config('composer', {...})` or
-- `require('composer').setup({...})`. See :help composer.

local markers = { '.composer', '.git' }

---@type vim.lsp.Config
return {
  cmd = { 'composer-lsp', '--stdio' },
  root_markers = markers,
  -- Files only: the nameless buffer Neovim starts with would otherwise get a server (no
  -- `filetypes` means all of them) rooted wherever Neovim was started.
  root_dir = function(bufnr, on_dir)
    if vim.api.nvim_buf_get_name(bufnr) ~= '' then
      on_dir(vim.fs.root(bufnr, markers))
    end
  end,
  -- ACP's session methods ride on the LSP connection: the transcript streams in as
  -- `session/update` notifications, and edits in review mode ask first.
  handlers = {
    ['session/update'] = function(...)
      return require('composer').on_update(...)
    end,
    ['session/request_permission'] = function(...)
      return require('composer').on_permission(...)
    end,
    -- Neovim's own handler, with a version check that refuses stale edits.
    ['workspace/applyEdit'] = function(...)
      return require('composer').on_apply_edit(...)
    end,
  },
  -- The sandbox level the server's commands run with (composer/isolation).
  on_init = function(client)
    require('composer').on_init(client)
  end,
  on_attach = function(client, bufnr)
    require('composer').on_attach(client, bufnr)
  end,
}
