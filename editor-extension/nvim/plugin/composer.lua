-- composer.nvim: the commands; lua/composer/ loads on first use. See :help composer.
if vim.g.loaded_composer then
  return
end
vim.g.loaded_composer = true

if vim.fn.has('nvim-0.11') == 0 then
  vim.notify('composer.nvim needs Neovim 0.11 or newer', vim.log.levels.WARN)
  return
end

-- Global rather than buffer-local (as in lspconfig's on_attach) because the chat, cancel and
-- mode commands are used from buffers the server is not attached to, the chat's among them.
local command = vim.api.nvim_create_user_command

command('ComposerChat', function(o)
  require('composer').chat(o.args)
end, { nargs = '*', desc = 'Composer: open the chat; with text, send it' })

command('ComposerAsk', function(o)
  require('composer').ask(o.args, o.line1, o.line2)
end, { nargs = '*', range = true, desc = 'Composer: ask about the selected lines' })

command('ComposerFix', function()
  require('composer').fix()
end, { desc = 'Composer: fix the diagnostic under the cursor' })

command('ComposerCancel', function()
  require('composer').cancel()
end, { desc = 'Composer: cancel the running turn' })

command('ComposerChanges', function()
  require('composer').changes()
end, { desc = "Composer: keep or undo the last turn's changes hunk by hunk" })

command('ComposerUndo', function(o)
  require('composer').undo_turn(o.bang)
end, {
  bang = true,
  desc = "Composer: undo the chat session's last turn, unsaved buffers included (!: and forget it)",
})

command('ComposerMode', function(o)
  require('composer').set_mode(o.args)
end, {
  nargs = 1,
  complete = function()
    return { 'agent', 'review' }
  end,
  desc = 'Composer: set the chat session mode (agent or review)',
})

command('ComposerStatus', function()
  require('composer').show_status()
end, { desc = 'Composer: the sandbox level of each running composer-lsp' })

command('ComposerNew', function()
  require('composer').new_session()
end, { desc = 'Composer: start a new chat session' })
