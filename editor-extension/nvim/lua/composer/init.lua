-- composer.nvim: Neovim's client for composer-lsp, Composer's language server.
--
--   require('composer').setup({ cmd = { 'composer-lsp', '--stdio' }, mode = 'review' })
--
-- The server config itself is lsp/composer.lua, so `vim.lsp.enable('composer')` works alone;
-- this module adds the chat (ACP's `session/*` methods on the LSP connection), the commands of
-- plugin/composer.lua, and the handlers lsp/composer.lua points at. Edits to open buffers arrive
-- as `workspace/applyEdit`, which Neovim applies itself (undo with `u`). The server's sandbox level
-- (composer/isolation) is asked for at start, for `require('composer').status()` (a statusline)
-- and :ComposerStatus; the server itself warns when it is weaker than bubblewrap. See :help composer.

local Composer = {}
local H = {}

--- Defaults: `setup(config)` merges `config` over a copy of these.
Composer.config = {
  -- The server command: composer-lsp speaking LSP on stdin/stdout.
  cmd = { 'composer-lsp', '--stdio' },
  -- New sessions' mode: 'agent' (permission rules decide) or 'review' (every edit asks first).
  mode = 'agent',
  -- Call vim.lsp.enable('composer'), so the server starts with the first file buffer.
  enable = true,
  chat = {
    -- Command run to make a window for the chat when no window shows it.
    open = 'botright vsplit',
    -- Lines of a tool's text output shown in the chat (the rest is elided).
    max_output_lines = 8,
  },
  changes = {
    -- Command run to make a window for :ComposerChanges when no window shows it.
    open = 'botright split',
  },
  -- Buffer-local keymaps where the server attaches (`false` leaves one unset). In the chat
  -- buffer: `i`, `a` or <CR> ask for a prompt, <C-c> cancels, `q` closes the window.
  keymaps = {
    chat = '<Leader>cc', -- normal mode: open the chat
    ask = '<Leader>ca', -- visual mode: ask about the selected lines
    fix = '<Leader>cf', -- normal mode: fix the diagnostic under the cursor
    cancel = '<Leader>cx', -- normal mode: cancel the running turn
  },
  -- Milliseconds to wait for the server to start before giving up.
  timeout = 10000,
}

H.default_config = vim.deepcopy(Composer.config)

--- The chat's session on each client, made or reloaded on first use (composer/sessions.lua).
H.sessions = require('composer.sessions')
--- Session id -> client id, while a turn started from here runs.
H.running = {}
--- Client id -> executeCommand turns in flight (their session ids come with the first update).
H.commands = {}
--- Client id -> the server's sandbox status (composer/isolation), once it answered.
H.isolation = {}

---@param config? table see |composer-config|
function Composer.setup(config)
  vim.validate('config', config, 'table', true)
  Composer.config = vim.tbl_deep_extend('force', vim.deepcopy(H.default_config), config or {})
  vim.lsp.config('composer', {
    cmd = Composer.config.cmd,
    init_options = { mode = Composer.config.mode },
  })
  if Composer.config.enable then
    vim.lsp.enable('composer')
  end
end

-- ---- commands ----------------------------------------------------------------------------------

--- :ComposerChat [text]: shows the chat; with text, sends it as a prompt.
---@param text? string
function Composer.chat(text)
  local client = H.client()
  H.chat().show(Composer.config.chat.open, true)
  if client and text and vim.trim(text) ~= '' then
    Composer.prompt(text, client)
  end
end

--- Sends `text` to the chat's session (started on first use) and streams the answer into the chat.
---@param text string
---@param client? vim.lsp.Client
function Composer.prompt(text, client)
  client = client or H.client()
  if not client then
    return
  end
  H.sessions.get(client, function(session_id)
    if H.is_running(session_id) then
      return H.notify('still answering; :ComposerCancel first', vim.log.levels.WARN)
    end
    H.chat().text(text, 'user')
    H.running[session_id] = client.id
    local changes = package.loaded['composer.changes']
    if changes then
      changes.turn_started(session_id) -- a listing of this session's last turn is out of date
    end
    local params = { sessionId = session_id, prompt = { { type = 'text', text = text } } }
    client:request('session/prompt', params, function(err, result)
      H.done(session_id, err, result)
    end)
  end)
end

--- :'<,'>ComposerAsk [question]: sends the lines with the question (asked for when not given).
---@param question string
---@param line1 integer
---@param line2 integer
function Composer.ask(question, line1, line2)
  local buf = vim.api.nvim_get_current_buf()
  local client = H.client(buf)
  local code = table.concat(vim.api.nvim_buf_get_lines(buf, line1 - 1, line2, false), '\n')
  local name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ':.')
  local function send(q)
    if not client or not q or vim.trim(q) == '' then
      return
    end
    local where = ('In %s, lines %d-%d:'):format(name, line1, line2)
    H.chat().show(Composer.config.chat.open, true)
    Composer.prompt(
      ('%s\n\n%s\n```%s\n%s\n```'):format(q, where, vim.bo[buf].filetype, code),
      client
    )
  end
  if vim.trim(question or '') ~= '' then
    return send(question)
  end
  vim.ui.input({ prompt = 'Ask Composer: ' }, send)
end

--- :ComposerFix: asks the server to fix the diagnostic under the cursor (composer.fixDiagnostic,
--- which runs in a session of its own).
function Composer.fix()
  local buf = vim.api.nvim_get_current_buf()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local diagnostic = H.diagnostic_at(buf, row - 1, col)
  if not diagnostic then
    return H.notify('no diagnostic on this line', vim.log.levels.WARN)
  end
  local client = H.client(buf)
  if not client then
    return
  end
  H.chat().show(Composer.config.chat.open, false)
  H.chat().text('Fix: ' .. diagnostic.message, 'user')
  H.commands[client.id] = (H.commands[client.id] or 0) + 1
  local params = {
    command = 'composer.fixDiagnostic',
    arguments = { vim.uri_from_bufnr(buf), vim.lsp.diagnostic.from({ diagnostic })[1] },
  }
  client:request('workspace/executeCommand', params, function(err, result)
    H.commands[client.id] = H.commands[client.id] - 1
    H.done(result and result.sessionId, err, result)
  end, buf)
end

--- :ComposerCancel: cancels every turn started from this Neovim that is still running.
function Composer.cancel()
  local any = false
  for session_id, client_id in pairs(H.running) do
    local client = H.is_running(session_id) and vim.lsp.get_client_by_id(client_id)
    if client then
      client:notify('session/cancel', { sessionId = session_id })
      require('composer.permission').withdraw(session_id, 'the turn was cancelled')
      any = true
    end
  end
  if not any then
    H.notify('nothing is running', vim.log.levels.INFO)
  end
end

--- :ComposerChanges: the changes of the chat session's last turn, hunk by hunk, to keep or undo
--- (|composer-changes|).
function Composer.changes()
  H.idle_session(
    'no chat session yet, so no changes to review',
    'a turn is running; :ComposerChanges once it ends',
    function(client, session_id)
      require('composer.changes').open(client, session_id, Composer.config.changes.open)
    end
  )
end

--- :ComposerUndo[!]: undoes the chat session's last turn (|:ComposerUndo|): the files go back to
--- before its first change, shell-made changes included, and so do the buffers it edited unsaved.
--- `forget` (the bang): the turn leaves the conversation too.
---@param forget? boolean
function Composer.undo_turn(forget)
  H.idle_session(
    'no chat session yet, so no turn to undo',
    'a turn is running; :ComposerCancel it first',
    function(client, session_id)
      local params = { sessionId = session_id, conversation = forget or nil }
      client:request('composer/rewind', params, function(err, result)
        if err then
          return H.notify('undo failed: ' .. err.message, vim.log.levels.ERROR)
        end
        local event = { pattern = 'ComposerUndone', modeline = false, data = result }
        if result.checkpointId == vim.NIL or result.checkpointId == nil then -- nothing to rewind
          H.chat().note('The last turn changed no file; Composer forgot it')
          return vim.api.nvim_exec_autocmds('User', event)
        end
        local changes, buffers = result.changes or {}, result.buffers or {}
        local restored =
          vim.list_extend(vim.list_extend({}, changes.modified or {}), changes.added or {})
        H.reload_saved(client.root_dir or vim.fn.getcwd(), restored)
        local paths = #(changes.added or {}) + #(changes.modified or {}) + #(changes.deleted or {})
        local reverted, backup = #(buffers.reverted or {}), tostring(result.backupCheckpointId)
        local note = 'Undid the last turn: %d paths restored on disk, %d open buffers put back'
          .. ' (`u` there undoes that); checkpoint %s holds the turn'
        H.chat().note(note:format(paths, reverted, backup))
        if result.forgotTurn then
          H.chat().note('Composer forgot the turn: the next prompt goes on from before it')
        end
        local refused = {}
        for path, why in pairs(buffers.refused or {}) do
          refused[#refused + 1] = path .. ' (' .. why .. ')'
        end
        if #refused > 0 then
          table.sort(refused)
          local message = 'the disk is restored, but these buffers were not put back: '
          H.notify(message .. table.concat(refused, '; '), vim.log.levels.WARN)
        end
        vim.api.nvim_exec_autocmds('User', event)
      end)
    end
  )
end

--- :ComposerMode {agent|review}: the chat session's mode.
---@param mode string
function Composer.set_mode(mode)
  local client = H.client()
  if not client then
    return
  end
  H.sessions.get(client, function(session_id)
    local params = { sessionId = session_id, modeId = mode }
    client:request('session/set_mode', params, function(err)
      if err then
        return H.notify(err.message, vim.log.levels.ERROR)
      end
      H.chat().note('mode: ' .. mode)
    end)
  end)
end

--- :ComposerNew: closes the chat's session and empties the chat; the next prompt starts anew.
function Composer.new_session()
  for client_id, session_id in pairs(H.sessions.by_client) do
    local client = vim.lsp.get_client_by_id(client_id)
    if client and not H.running[session_id] then
      client:request('session/close', { sessionId = session_id }, function() end)
    end
  end
  H.sessions.reset()
  H.chat().clear()
end

--- The sandbox level of the chat's server, for a statusline: 'sandbox: bwrap', 'sandbox: none
--- (weaker than bubblewrap)', or '' until the server said.
---@param client_id? integer
---@return string
function Composer.status(client_id)
  local id = client_id or H.last_client or next(H.isolation)
  local status = id and H.isolation[id]
  if not status then
    return ''
  end
  return 'sandbox: ' .. status.level .. (status.weaker and ' (weaker than bubblewrap)' or '')
end

--- :ComposerStatus: what each running server says about its sandbox.
function Composer.show_status()
  local said = false
  for _, client in ipairs(vim.lsp.get_clients({ name = 'composer' })) do
    local status = H.isolation[client.id]
    if status then
      local level = status.weaker and vim.log.levels.WARN or vim.log.levels.INFO
      H.notify(('%s: %s'):format(client.root_dir or '?', status.message), level)
      said = true
    end
  end
  if not said then
    H.notify('no composer-lsp has reported its sandbox yet', vim.log.levels.INFO)
  end
end

-- ---- what lsp/composer.lua calls ---------------------------------------------------------------

--- `on_init`: asks the server which sandbox level its commands run with (composer/isolation)
--- and fires `User ComposerIsolation`. (A weaker level's warning needs no notify of ours: the
--- server sends it as `window/showMessage`, which Neovim shows.)
function Composer.on_init(client)
  client:request('composer/isolation', {}, function(err, status)
    if err or type(status) ~= 'table' then
      return
    end
    H.isolation[client.id] = status
    vim.api.nvim_exec_autocmds('User', {
      pattern = 'ComposerIsolation',
      modeline = false,
      data = { client_id = client.id, isolation = status },
    })
  end)
end

--- `session/update`: renders the update into the chat.
function Composer.on_update(_, params, ctx)
  local update, session_id = params.update or {}, params.sessionId
  if H.sessions.reloading[session_id] then
    return -- the replay of a conversation the chat shows already
  end
  if not H.running[session_id] and (H.commands[ctx.client_id] or 0) > 0 then
    H.running[session_id] = ctx.client_id -- the first sign of a command's turn
  end
  local chat, kind = H.chat(), update.sessionUpdate
  if kind == 'agent_message_chunk' or kind == 'user_message_chunk' then
    local text = type(update.content) == 'table' and update.content.text
    if type(text) == 'string' then
      chat.text(text, kind == 'user_message_chunk' and 'user' or 'agent')
    end
  elseif kind == 'tool_call' or kind == 'tool_call_update' then
    chat.tool(update)
  elseif kind == 'plan' then
    chat.plan(update.entries)
  end
  vim.api.nvim_exec_autocmds('User', {
    pattern = 'ComposerUpdate',
    modeline = false,
    data = { sessionId = session_id, update = update },
  })
end

--- `session/request_permission` (composer/permission.lua): the call in the chat, then the question.
function Composer.on_permission(_, params, ctx)
  return require('composer.permission').ask(params, ctx, H.chat(), Composer.config.chat.open)
end

--- `workspace/applyEdit`: Neovim's handler, except that an edit to a buffer that changed since
--- the server last heard of it (typing not yet sent: didChange is debounced) is refused, so the
--- agent reads again. Neovim itself applies such an edit blind when the server's version is 0,
--- and otherwise skips it ("newer than edits") yet answers applied.
function Composer.on_apply_edit(err, params, ctx)
  local changes = type(params.edit) == 'table' and params.edit.documentChanges or {}
  for _, change in ipairs(type(changes) == 'table' and changes or {}) do
    local doc = change.textDocument
    local version = type(doc) == 'table' and doc.version
    if type(version) == 'number' then
      local bufnr = vim.uri_to_bufnr(doc.uri)
      if vim.api.nvim_buf_is_loaded(bufnr) and vim.lsp.util.buf_versions[bufnr] > version then
        local reason = 'the buffer changed since Composer read it; read it again'
        return { applied = false, failureReason = reason }
      end
    end
  end
  return vim.lsp.handlers['workspace/applyEdit'](err, params, ctx)
end

--- Buffer-local keymaps (|composer-keymaps|) where the server attaches.
function Composer.on_attach(_, bufnr)
  local maps = Composer.config.keymaps
  local function map(mode, lhs, rhs, desc)
    if lhs then
      vim.keymap.set(mode, lhs, rhs, { buffer = bufnr, desc = 'Composer: ' .. desc })
    end
  end
  map('n', maps.chat, '<Cmd>ComposerChat<CR>', 'open the chat')
  map('x', maps.ask, ':ComposerAsk<CR>', 'ask about the selection')
  map('n', maps.fix, '<Cmd>ComposerFix<CR>', 'fix the diagnostic under the cursor')
  map('n', maps.cancel, '<Cmd>ComposerCancel<CR>', 'cancel the running turn')
end

-- ---- helpers -----------------------------------------------------------------------------------

--- The chat module, its buffer's keymaps set when the buffer is made.
function H.chat()
  local chat = require('composer.chat')
  chat.max_output_lines = Composer.config.chat.max_output_lines
  local buf, created = chat.buf()
  if created then
    local function ask()
      vim.ui.input({ prompt = 'Composer> ' }, function(text)
        if text and vim.trim(text) ~= '' then
          Composer.prompt(text)
        end
      end)
    end
    for _, lhs in ipairs({ 'i', 'a', '<CR>' }) do
      vim.keymap.set('n', lhs, ask, { buffer = buf, desc = 'Composer: send a prompt' })
    end
    vim.keymap.set('n', '<C-c>', Composer.cancel, { buffer = buf, desc = 'Composer: cancel' })
    vim.keymap.set('n', 'q', '<Cmd>close<CR>', { buffer = buf, desc = 'Composer: close the chat' })
  end
  return chat
end

--- The composer client of `bufnr`, else the one the chat last used, else any; started (for the
--- root of `bufnr`, or of the current directory) if none runs. Nil, with a message, if it does
--- not come up within `config.timeout`.
---@param bufnr? integer
---@return vim.lsp.Client?
function H.client(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local last = H.last_client and vim.lsp.get_client_by_id(H.last_client)
  local client = vim.lsp.get_clients({ name = 'composer', bufnr = bufnr })[1]
    or (last and not last:is_stopped() and last)
    or vim.lsp.get_clients({ name = 'composer' })[1]
  if not client then
    client = H.start(bufnr)
  end
  if client and not client.initialized then
    vim.wait(Composer.config.timeout, function()
      return client.initialized or client:is_stopped()
    end, 20)
  end
  if not client or not client.initialized then
    local cmd = table.concat(vim.tbl_map(tostring, Composer.config.cmd), ' ')
    local message = ('composer-lsp did not start (cmd: %s); see :checkhealth vim.lsp'):format(cmd)
    return H.notify(message, vim.log.levels.ERROR)
  end
  H.last_client = client.id
  return client
end

--- Starts the client for the root vim.lsp.enable would pick.
---@param bufnr integer
---@return vim.lsp.Client?
function H.start(bufnr)
  local config = vim.deepcopy(vim.lsp.config.composer)
  if not config then
    return H.notify('no lsp/composer.lua on the runtimepath', vim.log.levels.ERROR)
  end
  -- A file buffer is attached (which also finds a client still initializing for it, as Neovim
  -- 0.11 skips reuse with `attach = false`); others, like the chat, are not.
  local file = vim.bo[bufnr].buftype == '' and vim.api.nvim_buf_get_name(bufnr) ~= ''
  config.root_dir = vim.fs.root(file and bufnr or vim.fn.getcwd(), config.root_markers or {})
  local id = vim.lsp.start(config, { bufnr = bufnr, attach = file })
  return id and vim.lsp.get_client_by_id(id)
end

--- Reloads the unmodified buffers of `paths` (relative to `root`), which a rewind rewrote on
--- disk: Neovim would otherwise show the undone text until `:checktime`.
function H.reload_saved(root, paths)
  for _, path in ipairs(paths) do
    local buf = vim.fn.bufnr(vim.fs.joinpath(root, path))
    if buf ~= -1 and vim.api.nvim_buf_is_loaded(buf) and not vim.bo[buf].modified then
      vim.api.nvim_buf_call(buf, function()
        vim.cmd('silent edit')
      end)
    end
  end
end

--- Calls `callback(client, session_id)` with the chat's session when none of its turns runs
--- (reloaded after a restart: composer/sessions.lua); says `none` when there is no session yet
--- and `busy` while a turn runs.
function H.idle_session(none, busy, callback)
  local client = H.client()
  if not client then
    return
  end
  local session_id = H.sessions.of(client)
  if not session_id then
    return H.notify(none, vim.log.levels.INFO)
  end
  if H.is_running(session_id) then
    return H.notify(busy, vim.log.levels.WARN)
  end
  H.sessions.get(client, function(id)
    callback(client, id)
  end)
end

--- Whether a turn of `session_id` started from here still runs. One whose server stopped (a
--- crash, :LspRestart) never answers: it ends here, noted in the chat.
function H.is_running(session_id)
  local client_id = H.running[session_id]
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if client_id and (not client or client:is_stopped()) then
    H.done(session_id, { message = 'the server stopped during the turn' })
    return false
  end
  return client_id ~= nil
end

--- A turn ended: note how in the chat, and fire `User ComposerTurnDone`.
function H.done(session_id, err, result)
  local stop = err and 'error' or (result and result.stopReason) or 'unknown'
  if session_id then
    H.running[session_id] = nil
    require('composer.permission').withdraw(session_id, 'the turn ended (' .. stop .. ')')
  end
  H.chat().note(err and ('error: ' .. tostring(err.message)) or stop)
  local meta = type(result) == 'table' and type(result._meta) == 'table' and result._meta.composer
  local chats = vim.tbl_values(H.sessions.by_client)
  local chat_session = session_id and vim.tbl_contains(chats, session_id)
  if chat_session and type(meta) == 'table' and type(meta.checkpoint) == 'string' then
    -- The chat's session only: :ComposerChanges reviews its turns (not :ComposerFix's).
    H.chat().note('Changes: :ComposerChanges to keep or undo them')
  end
  vim.api.nvim_exec_autocmds('User', {
    pattern = 'ComposerTurnDone',
    modeline = false,
    data = { sessionId = session_id, stopReason = stop, error = err and err.message },
  })
end

--- The diagnostic at (row, col) of `bufnr` (0-based), else the line's first.
function H.diagnostic_at(bufnr, row, col)
  local diagnostics = vim.diagnostic.get(bufnr, { lnum = row })
  for _, d in ipairs(diagnostics) do
    if d.col <= col and col <= (d.end_col or d.col) then
      return d
    end
  end
  return diagnostics[1]
end

function H.notify(message, level)
  vim.notify('Composer: ' .. message, level)
end

return Composer
